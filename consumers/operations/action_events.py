"""The events operator actions publish, made from the audit as the projection has it.

Whether one applies is the transition table's call (:func:`statemachine.machine.next_status`),
so an event refused here (:class:`~statemachine.errors.WrongState`, naming why) would also be
recorded-not-applied by every consumer:

- :func:`operator_failure`: ``AuditFailed`` of a ``running`` audit, ``failed_by = "operator"``,
  the code given and the reason as its detail;
- :func:`restoration`: ``AuditRestored`` of an audit failed by the reconciler or an operator (a
  workflow's own failure is never undone), naming the failure it undoes (found in the audit's
  history) and carrying the audit's facts, so consumers that keep no state of failed audits
  resume it. :func:`check_restorable` says whether that can be before the history is read.

:func:`can_fail` and :func:`can_restore` ask the same table without refusing, for whoever
offers the actions (the console's audit page).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

from consumers.operations.action_input import check_code, check_reason, last_failure
from projections.row import AuditRow
from statemachine.errors import WrongState
from statemachine.events import (
    AuditEvent,
    AuditFailed,
    AuditFailedData,
    AuditRestored,
    AuditRestoredData,
    AuditStartedData,
    FailedBy,
)
from statemachine.machine import FAILED, next_status

__all__ = [
    "PRODUCER",
    "can_fail",
    "can_restore",
    "check_restorable",
    "operator_failure",
    "restoration",
]

PRODUCER: Final = "auditrec-operator"


def can_fail(row: AuditRow) -> bool:
    """Whether the transition table lets an operator fail ``row``'s audit."""
    return next_status(row.status, "AuditFailed", row.state) is not None


def can_restore(row: AuditRow) -> bool:
    """Whether the transition table lets ``row``'s audit be restored."""
    return next_status(row.status, "AuditRestored", row.state) is not None


def operator_failure(
    row: AuditRow,
    code: str,
    reason: str,
    actor: str,
    at: datetime,
    on_behalf_of: str | None = None,
) -> AuditFailed:
    """``row``'s audit failed by ``actor`` (for ``on_behalf_of``, when named) with ``code``
    (an error code) for ``reason``."""
    code, reason = check_code(code), check_reason(reason)
    if not can_fail(row):
        raise WrongState(
            f"audit {row.audit_id!r} is {row.status}: only a running audit can be failed"
        )
    return AuditFailed(
        **_envelope(row.audit_id, at),
        data=AuditFailedData(
            error_code=code,
            error_detail=reason,
            failed_phase=row.state.current_phase,
            failed_by=FailedBy.OPERATOR,
            actor=actor,
            on_behalf_of=on_behalf_of,
        ),
    )


def check_restorable(row: AuditRow) -> None:
    """Refuse (``WrongState``) unless the transition table lets ``row``'s audit be restored."""
    s = row.state
    if can_restore(row):
        return
    if s.status == FAILED:
        raise WrongState(
            f"audit {row.audit_id!r} failed by {s.failed_by}: only a failure by the "
            "reconciler or an operator is restored (a workflow's own failure never is)"
        )
    raise WrongState(f"audit {row.audit_id!r} is {s.status}: only a failed audit can be restored")


def restoration(
    row: AuditRow,
    history: Sequence[AuditEvent],
    reason: str,
    actor: str,
    at: datetime,
    on_behalf_of: str | None = None,
) -> AuditRestored:
    """``row``'s audit restored by ``actor`` for ``reason``, undoing the last failure in its
    ``history`` (the audit is one :func:`check_restorable` lets through)."""
    s = row.state
    failure = last_failure(history)
    if failure is None:
        raise WrongState(f"audit {row.audit_id!r}: its failure is not in its history")
    if s.project_id is None:  # every started audit has one: the start is missing
        raise WrongState(f"audit {row.audit_id!r}: its start is not in its history")
    return AuditRestored(
        **_envelope(row.audit_id, at),
        data=AuditRestoredData(
            reason=reason,
            actor=actor,
            failure_id=failure.event_id,
            failed_by=failure.data.failed_by,
            error_code=failure.data.error_code,
            resume=AuditStartedData(
                project_id=s.project_id,
                organization_id=s.organization_id,
                started_by_user_id=s.started_by_user_id,
                start_url=s.start_url,
                workflow_instance_id=s.workflow_instance_id,
                started_at=s.started_at,
                current_phase=s.current_phase,
                pages_total=s.pages_total,
            ),
            pages_crawled=s.pages_crawled,
            on_behalf_of=on_behalf_of,
        ),
    )


def _envelope(audit_id: str, at: datetime) -> dict[str, Any]:
    return {"event_id": uuid.uuid4(), "audit_id": audit_id, "occurred_at": at, "producer": PRODUCER}
