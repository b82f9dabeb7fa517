"""The console's pages over the operators' tools: the dead letters (list, one record's reason
and original bytes, replay with a dry run first) and the policy backtest (a form; it reads
history and writes nothing, so ``read`` is enough).

A dead letter's page offers the replay of its record only when it can work (a dry run of it
is accepted: it decodes today and its event id names no other event; else the page says why),
and, until it has been replayed, a corrected body to replay instead: a text area holding the
original, judged as ``POST /events`` and ``auditrec dead-letters replay --body`` judge it
(:func:`~consumers.operations.deadletters.replay_dead_letter`), a dry run first. A corrected
body that is refused comes back in its text area with each problem, and the status of the
refusal (422, 403, 409)."""

# No `from __future__ import annotations`: FastAPI evaluates the endpoints' annotations.

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse

from consumers.api.errors import http_status
from consumers.api.ui.access import Session
from consumers.api.ui.actions import actor_of, refused
from consumers.api.ui.render import page
from consumers.api.ui.session import form, operator, viewer
from consumers.operations.backtest import backtest, describe, parse_since
from consumers.operations.deadletters import (
    list_dead_letters,
    replay_dead_letter,
    show_dead_letter,
)
from consumers.operations.service import Operations
from statemachine.errors import AuditrecError, InvalidInput, NotFound

__all__ = ["add_tool_pages"]

DEAD_LETTERS_SHOWN = 100
Viewer = Annotated[Session, Depends(viewer)]


def add_tool_pages(router: APIRouter, ops: Operations) -> None:
    backends = ops.backends

    @router.get("/ui/dead-letters", response_class=HTMLResponse, include_in_schema=False)
    async def dead_letters(request: Request, session: Viewer, consumer: str = "") -> HTMLResponse:
        listed = await list_dead_letters(
            backends.log, limit=DEAD_LETTERS_SHOWN, consumer=consumer or None
        )
        return page(
            request,
            "dead_letters.html",
            letters=listed["dead_letters"],
            consumer=consumer,
            shown=DEAD_LETTERS_SHOWN,
        )

    @router.get("/ui/dead-letters/{position}", response_class=HTMLResponse, include_in_schema=False)
    async def dead_letter(request: Request, session: Viewer, position: str) -> HTMLResponse:
        try:
            letter = await show_dead_letter(backends.log, position)
        except (InvalidInput, NotFound) as exc:
            return refused(request, exc, "/ui/dead-letters")
        cannot = await _cannot_replay(letter, session) if session.can("operate") else None
        return page(
            request, "dead_letter.html", letter=letter, result=None, body=None, cannot=cannot
        )

    async def _cannot_replay(letter: dict[str, Any], session: Session) -> str | None:
        """Why the record cannot be replayed as it is (a dry run says: it does not decode,
        its event id names other content, ...), or ``None`` when it can."""
        if letter["replayed"] is not None:
            return "already replayed"
        if not letter["decodes"]:
            return letter["decode_error"] or "it does not decode"
        try:
            await replay_dead_letter(
                backends.log,
                letter["position"],
                actor=actor_of(session),
                dry_run=True,
                audits=backends.store.audits,
            )
        except AuditrecError as exc:
            return "; ".join(getattr(exc, "problems", None) or [str(exc)])
        return None

    @router.post(
        "/ui/dead-letters/{position}/replay",
        response_class=HTMLResponse,
        include_in_schema=False,
    )
    async def replay(request: Request, position: str) -> HTMLResponse:
        fields = await form(request, backends.settings.api_max_body_bytes)
        session = await operator(request, fields)
        confirmed = fields.get("confirm") == "yes"
        body = fields.get("body")  # a corrected body; absent: the original record
        try:
            letter = await show_dead_letter(backends.log, position)
        except (InvalidInput, NotFound) as exc:
            return refused(request, exc, "/ui/dead-letters")
        try:
            if body is not None and not body.strip():
                raise InvalidInput("the corrected body is empty", ["body: paste the envelope"])
            result = await replay_dead_letter(
                backends.log,
                position,
                actor=actor_of(session),
                body=body.encode() if body is not None else None,
                dry_run=not confirmed,
                audits=backends.store.audits,
            )
            if result["published"]:
                letter = await show_dead_letter(backends.log, position)
        except AuditrecError as exc:
            if body is None:
                return refused(request, exc, f"/ui/dead-letters/{position}")
            problems = getattr(exc, "problems", None) or [str(exc)]
            return page(
                request,
                "dead_letter.html",
                status_code=http_status(exc),
                letter=letter,
                result=None,
                body=body,
                problems=problems,
                cannot=None if letter["decodes"] else letter["decode_error"],
            )
        return page(
            request, "dead_letter.html", letter=letter, result=result, body=body, cannot=None
        )

    @router.get("/ui/backtest", response_class=HTMLResponse, include_in_schema=False)
    async def backtest_page(
        request: Request,
        session: Viewer,
        set_: Annotated[str, Query(alias="set", max_length=2000)] = "",
        since: Annotated[str, Query(max_length=64)] = "",
    ) -> HTMLResponse:
        assignments = [line.strip() for line in set_.splitlines() if line.strip()]
        result: dict[str, Any] | None = None
        problems: list[str] = []
        if assignments:
            try:
                start = parse_since(since or None, datetime.now(UTC))
                result = await backtest(
                    backends.store.audits, backends.policy, assignments, since=start
                )
            except InvalidInput as exc:
                problems = exc.problems
        lines = [(d, describe(d)) for d in result["differences"]] if result else []
        return page(
            request,
            "backtest.html",
            status_code=422 if problems else 200,
            set_text=set_,
            since=since,
            result=result,
            lines=lines,
            problems=problems,
        )
