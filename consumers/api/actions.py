"""Operator actions over HTTP (scope ``operate``): fail, restore and probe one audit, and fail
or restore over a filter. Each records who authenticated (``token:<name>``, ``anonymous``)
and, when the body names one, the person acted for (``on_behalf_of``); a body whose
``actor`` is anyone else is refused (403). The work is
:class:`~consumers.operations.actions.Actions`, the same as ``auditrec fail|restore|probe``.

Errors: 404 unknown audit, 409 an action the audit's state does not allow, 422 bad input;
each names the problem. Bulk actions are dry runs unless the body says ``"dry_run": false``.
"""

# No `from __future__ import annotations`: FastAPI evaluates the endpoints' annotations.

from datetime import timedelta
from typing import Any

from fastapi import APIRouter, Request

from consumers.api.action_models import (
    ActionOutcome,
    BulkFail,
    BulkOutcome,
    BulkRestore,
    FailAudit,
    RestoreAudit,
)
from consumers.api.audits import AuditIdPath
from consumers.api.guards import actor_of, claimed_actor
from consumers.api.models import R403, R404, R422, R503, Message, Responses
from consumers.operations.actions import Actions
from consumers.operations.listing import AuditFilter
from consumers.operations.service import Operations
from statemachine.errors import InvalidInput
from statemachine.policy import parse_duration

__all__ = ["add_action_routes"]

R409: Responses = {
    409: {"model": Message, "description": "The audit's state does not allow this action."}
}


def add_action_routes(private: APIRouter, ops: Operations) -> None:
    def actions(
        request: Request, body: FailAudit | RestoreAudit | BulkFail | BulkRestore | None = None
    ) -> Actions:
        actor = actor_of(request)
        if body is None:
            return Actions(ops, actor)
        return Actions(ops, claimed_actor(actor, body.actor), body.on_behalf_of)

    @private.post(
        "/audits/fail",
        response_model=BulkOutcome,
        tags=["operator actions"],
        summary="Fail every running audit a filter selects (a dry run unless dry_run=false)",
        responses={**R403, **R422, **R503},
    )
    async def fail_many(body: BulkFail, request: Request) -> dict[str, Any]:
        result = await actions(request, body).fail_many(
            _filter(body), body.code, body.reason, dry_run=body.dry_run
        )
        return result.as_dict()

    @private.post(
        "/audits/restore",
        response_model=BulkOutcome,
        tags=["operator actions"],
        summary="Restore every failure auditrec made among the audits a filter selects",
        responses={**R403, **R422, **R503},
    )
    async def restore_many(body: BulkRestore, request: Request) -> dict[str, Any]:
        result = await actions(request, body).restore_many(
            _filter(body), body.reason, dry_run=body.dry_run
        )
        return result.as_dict()

    @private.post(
        "/audits/{audit_id}/fail",
        response_model=ActionOutcome,
        tags=["operator actions"],
        summary="Fail a running audit with an error code (AuditFailed by operator)",
        responses={**R403, **R404, **R409, **R422, **R503},
    )
    async def fail(audit_id: AuditIdPath, body: FailAudit, request: Request) -> dict[str, Any]:
        result = await actions(request, body).fail(
            audit_id, body.code, body.reason, dry_run=body.dry_run
        )
        return result.as_dict()

    @private.post(
        "/audits/{audit_id}/restore",
        response_model=ActionOutcome,
        tags=["operator actions"],
        summary="Undo a failure by the reconciler or an operator: the audit runs again",
        responses={**R403, **R404, **R409, **R422, **R503},
    )
    async def restore(
        audit_id: AuditIdPath, body: RestoreAudit, request: Request
    ) -> dict[str, Any]:
        result = await actions(request, body).restore(audit_id, body.reason, dry_run=body.dry_run)
        return result.as_dict()

    @private.post(
        "/audits/{audit_id}/probe",
        response_model=ActionOutcome,
        tags=["operator actions"],
        summary="Probe a running audit now and answer with the reconciler's outcome",
        responses={**R404, **R409, **R422, **R503},
    )
    async def probe(audit_id: AuditIdPath, request: Request) -> dict[str, Any]:
        return (await actions(request).probe(audit_id)).as_dict()


def _filter(body: BulkFail | BulkRestore) -> AuditFilter:
    age: timedelta | None = None
    if body.older_than is not None:
        try:
            age = parse_duration(body.older_than)
        except ValueError as exc:
            raise InvalidInput("invalid older_than", [f"body.older_than: {exc}"]) from None
    return AuditFilter(body.status, body.project_id, body.error_code, age)
