"""The console's forms that change something. Each needs the session cookie, its CSRF token
and ``operate`` (:func:`~consumers.api.ui.session.operator`), and a page shows them only to a
session that has it (``can("operate")`` in the templates). Nothing is written before the
operator has seen what will be: the failure or restoration of one audit is shown (code, reason,
actor) and recorded only when confirmed; what touches many audits is previewed (a dry run
listing them, with the code and reason it applies) and done only when the preview is confirmed.

- ``POST /ui/audits/{id}/fail|restore``: the operator actions of
  :class:`~consumers.operations.actions.Actions` (as ``auditrec fail|restore``): a
  confirmation step first, then back to the audit's page, which shows the outcome;
  ``POST /ui/audits/{id}/probe`` probes at once (it records an observation, never a decision);
- ``POST /ui/bulk/fail|restore``: the same over the audits page's filter, a dry run first;
- ``POST /ui/brake/release|discard``: end the mass-failure brake, a dry run first;
- ``POST /ui/deliveries/retry``: deliver parked outcome entries again (those named, each with
  its audit's others, or all of an endpoint's), a dry run listing them first, then back to
  ``/ui/deliveries``, which says what was asked for;
- ``POST /ui/orphans/terminate``: terminate orphans through the Workflows API (one, or every
  open one of a workflow), a preview listing them first, then back to ``/ui/orphans``, which
  says what the API answered.

A refusal is a page of its own kind (:func:`refused`): 404 for what does not exist, 409 with
the reason for a conflict (the audit's state), 403 naming the scope needed, 422 listing each
problem. The actor recorded is the session's token, as over the API: ``token:<name>``, or
``anonymous`` when no token is set; the forms of one audit take the person acted for
(``on_behalf_of``).
"""

# No `from __future__ import annotations`: FastAPI evaluates the endpoints' annotations.

from typing import Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from consumers.api.errors import http_status
from consumers.api.ui.access import Session
from consumers.api.ui.pages import audit_filter
from consumers.api.ui.render import page
from consumers.api.ui.session import form, operator
from consumers.operations.actions import Actions
from consumers.operations.listing import AuditFilter
from consumers.operations.service import Operations
from statemachine.errors import AuditrecError, InvalidInput

__all__ = [
    "FILTER_FIELDS",
    "actor_of",
    "add_action_routes",
    "add_orphan_actions",
    "error_page",
    "parse_filter",
    "refused",
]

REASON_LIMIT = 2000
BRAKE_ENDINGS = {"release": "released", "discard": "discarded"}
RETRY_SHOWN = 200  # the entries a retry's preview lists (its count covers them all)
FILTER_FIELDS = ("project", "status", "code", "running_longer_than", "shadow")
CONFIRMED = ("fail", "restore")  # the actions on one audit shown before they are recorded


def actor_of(session: Session) -> str:
    """The actor recorded with what the console does: ``token:<name>`` of the session's
    token, as over the API (``anonymous`` when no token is configured)."""
    return session.actor


def error_page(
    request: Request, status_code: int, problems: list[str], back: str = "/ui"
) -> HTMLResponse:
    """The page of a refusal: its kind by ``status_code`` (not found, conflict, not allowed,
    invalid input), each problem, and a way back."""
    return page(request, "error.html", status_code=status_code, problems=problems, back=back)


def refused(request: Request, exc: AuditrecError, back: str = "/ui") -> HTMLResponse:
    """The page of one of the core's errors, with the JSON API's status for it."""
    problems = getattr(exc, "problems", None) or [str(exc)]
    return error_page(request, http_status(exc), problems, back)


def parse_filter(fields: dict[str, str], problems: list[str]) -> AuditFilter:
    """The audits page's filter, from query or form fields (bad ones named in ``problems``)."""
    project, status, code, longer, shadow = (fields.get(name, "") for name in FILTER_FIELDS)
    return audit_filter(project, status, code, longer, shadow, problems)


def _missing(action: str, code: str, reason: str) -> list[str]:
    """What a form to fail or restore one audit left out (nothing is chosen for the operator)."""
    problems = []
    if action == "fail" and not code:
        problems.append("code: choose the error code to record (none is chosen for you)")
    if not reason:
        problems.append("reason: required (say why; it is recorded with the action)")
    return problems


def add_action_routes(router: APIRouter, ops: Operations) -> None:
    @router.post("/ui/audits/{audit_id}/{action}", include_in_schema=False)
    async def act(request: Request, audit_id: str, action: str) -> Response:
        fields = await form(request)
        session = await operator(request, fields)
        back = f"/ui/audits/{quote(audit_id)}"
        if action not in (*CONFIRMED, "probe"):
            return error_page(request, 404, [f"no action {action!r} on an audit"], back)
        on_behalf_of = fields.get("on_behalf_of", "").strip() or None
        code, reason = fields.get("code", "").strip(), fields.get("reason", "").strip()
        confirmed = fields.get("confirm") == "yes"
        try:
            actions = Actions(ops, actor_of(session), on_behalf_of)
            if action == "probe":
                result = await actions.probe(audit_id)
            else:
                missing = _missing(action, code, reason)
                if missing:
                    raise InvalidInput("; ".join(missing), missing)
                if action == "fail":
                    result = await actions.fail(audit_id, code, reason, dry_run=not confirmed)
                else:
                    result = await actions.restore(audit_id, reason, dry_run=not confirmed)
        except AuditrecError as exc:
            return refused(request, exc, back)
        if action in CONFIRMED and not confirmed:  # judged, not recorded: what would be
            return page(
                request,
                "audit_action.html",
                action=action,
                audit_id=audit_id,
                code=code,
                reason=reason,
                on_behalf_of=on_behalf_of or "",
                actor=result.actor,
                result=result,
            )
        done = urlencode({"done": action, "message": result.message[:300]})
        return RedirectResponse(f"{back}?{done}", status_code=303)

    @router.post("/ui/bulk/{action}", response_class=HTMLResponse, include_in_schema=False)
    async def bulk(request: Request, action: str) -> HTMLResponse:
        fields = await form(request)
        session = await operator(request, fields)
        if action not in ("fail", "restore"):
            return error_page(request, 404, [f"no bulk action {action!r}"], "/ui/audits")
        problems: list[str] = []
        where = parse_filter(fields, problems)
        if problems:
            return error_page(request, 422, problems, "/ui/audits")
        confirmed = fields.get("confirm") == "yes"
        actions = Actions(ops, actor_of(session))
        reason = fields.get("reason", "")
        try:
            if action == "fail":
                result = await actions.fail_many(
                    where, fields.get("fail_code", ""), reason, dry_run=not confirmed
                )
            else:
                result = await actions.restore_many(where, reason, dry_run=not confirmed)
        except AuditrecError as exc:
            return refused(request, exc, "/ui/audits")
        carried = {name: fields.get(name, "") for name in (*FILTER_FIELDS, "fail_code", "reason")}
        return page(
            request,
            "bulk_action.html",
            action=action,
            result=result,
            carried=carried,
            code=fields.get("fail_code", "").strip(),
            reason=reason.strip(),
            actor=actor_of(session),
        )

    @router.post("/ui/brake/{how}", response_class=HTMLResponse, include_in_schema=False)
    async def end_brake(request: Request, how: str) -> HTMLResponse:
        fields = await form(request)
        session = await operator(request, fields)
        if how not in BRAKE_ENDINGS:
            return error_page(request, 404, [f"no brake action {how!r}"])
        reason = fields.get("reason", "").strip()[:REASON_LIMIT] or None
        confirmed = fields.get("confirm") == "yes"
        result = await ops.end_brake(
            BRAKE_ENDINGS[how], actor_of(session), reason, dry_run=not confirmed
        )
        return page(
            request,
            "brake_action.html",
            how=how,
            reason=reason or "",
            actor=actor_of(session),
            result=result,
            confirmed=confirmed,
        )

    @router.post("/ui/deliveries/retry", response_class=HTMLResponse, include_in_schema=False)
    async def retry_deliveries(request: Request) -> Response:
        fields = await form(request)
        session = await operator(request, fields)
        every = fields.get("all") == "yes"
        ids = None if every else fields.get("ids", "").split()
        endpoint = fields.get("endpoint", "").strip() or None
        confirmed = fields.get("confirm") == "yes"
        try:
            result = await ops.retry_deliveries(
                ids, endpoint, actor_of(session), dry_run=not confirmed
            )
        except AuditrecError as exc:
            return refused(request, exc, "/ui/deliveries")
        if confirmed:
            back = {"endpoint": endpoint} if endpoint else {}
            done = urlencode({**back, "done": "retry", "message": _retried(result)})
            return RedirectResponse(f"/ui/deliveries?{done}", status_code=303)
        return page(
            request,
            "delivery_retry.html",
            result=result,
            shown=RETRY_SHOWN,
            every=every,
            ids=ids or [],
            endpoint=endpoint or "",
        )


def add_orphan_actions(router: APIRouter, ops: Operations) -> None:
    @router.post("/ui/orphans/terminate", response_class=HTMLResponse, include_in_schema=False)
    async def terminate_orphans(request: Request) -> Response:
        fields = await form(request)
        session = await operator(request, fields)
        every = fields.get("all") == "yes"
        workflow = fields.get("workflow", "").strip() or None
        instance_id = fields.get("instance_id", "")
        confirmed = fields.get("confirm") == "yes"
        behalf = fields.get("on_behalf_of", "").strip()[:200] or None
        if not every and (workflow is None or not instance_id):
            problems = ["name an orphan (workflow and instance id), or ask for all of them"]
            return error_page(request, 422, problems, "/ui/orphans")
        targets = None if every else [(workflow or "", instance_id)]
        try:
            result = await ops.terminate_orphans(
                targets,
                workflow if every else None,
                actor_of(session),
                behalf,
                dry_run=not confirmed,
                strict=not every,
            )
        except AuditrecError as exc:
            return refused(request, exc, "/ui/orphans")
        if confirmed:
            back = {"workflow": workflow} if every and workflow else {}
            done = urlencode({**back, "done": "terminate", "message": _terminated(result)})
            return RedirectResponse(f"/ui/orphans?{done}", status_code=303)
        return page(
            request,
            "orphan_terminate.html",
            result=result,
            every=every,
            workflow=workflow or "",
            instance_id=instance_id,
            actor=actor_of(session),
        )


def _terminated(result: dict[str, Any]) -> str:
    """What a confirmed termination got from the Workflows API, for the orphans page's notice."""
    told = [f"{r['workflow']}/{r['instance_id']}: {r['result']}" for r in result["results"][:5]]
    more = len(result["results"]) - len(told)
    return f"{result['terminated']} terminated ({'; '.join(told) or 'none chosen'}" + (
        f"; and {more} more)" if more > 0 else ")"
    )


def _retried(result: dict[str, Any]) -> str:
    """What a confirmed retry asked for, for the deliveries page's notice."""
    asked, chosen = result["requested"], len(result["entries"])
    told = f"{asked} parked entr{'y' if asked == 1 else 'ies'} to be delivered again"
    if asked < chosen:
        told += f" ({chosen - asked} of the {chosen} chosen had been asked for already)"
    return told + "; the endpoint's feed sends them within seconds"
