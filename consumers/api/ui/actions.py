"""The console's forms that change something. Each needs the session cookie, its CSRF token
and ``operate`` (:func:`~consumers.api.ui.session.operator`); what touches many audits is
previewed first (a dry run listing them) and done only when the preview is confirmed.

- ``POST /ui/brake/release`` and ``/ui/brake/discard``: end the mass-failure brake, as
  ``auditrec brake release|discard`` (the actor is the token's name).
"""

# No `from __future__ import annotations`: FastAPI evaluates the endpoints' annotations.

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from consumers.api.ui.render import page
from consumers.api.ui.session import form, operator
from consumers.operations.operations import Operations

__all__ = ["actor_of", "add_action_routes"]

REASON_LIMIT = 2000
BRAKE_ENDINGS = {"release": "released", "discard": "discarded"}


def actor_of(name: str) -> str:
    """The actor recorded with an event the console appends: the token's name."""
    return f"ui:{name}"


def add_action_routes(router: APIRouter, ops: Operations) -> None:
    @router.post("/ui/brake/{how}", response_class=HTMLResponse, include_in_schema=False)
    async def end_brake(request: Request, how: str) -> HTMLResponse:
        fields = await form(request)
        session = await operator(request, fields)
        if how not in BRAKE_ENDINGS:
            return page(request, "error.html", status_code=404, why=f"no brake action {how!r}")
        reason = fields.get("reason", "").strip()[:REASON_LIMIT] or None
        confirmed = fields.get("confirm") == "yes"
        result = await ops.end_brake(
            BRAKE_ENDINGS[how], actor_of(session.name), reason, dry_run=not confirmed
        )
        return page(
            request,
            "brake_action.html",
            how=how,
            reason=reason or "",
            result=result,
            confirmed=confirmed,
        )
