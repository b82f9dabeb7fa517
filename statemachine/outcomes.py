"""The entries of the outcome feed (DESIGN §10 "Outcomes go out"): each change of an audit's
status that auditrec decides or records, as the product whose audit it is receives it.

:func:`outcome` is pure: the state before an event, the event, and the state after it in; an
:class:`Outcome` out when the event changed the audit's status or its held decision, else
``None``. An event the transition table does not apply (a failure of an audit failed already, a
second hold) changes nothing and is no outcome. An entry's ``id`` derives from the causing
event's key (its audit and event ids), so an entry made twice — by a rebuild, a redelivery —
is the same entry, and a consumer deduplicates by it. Entries come in the order of the audit's
history.

======================================  ===========================  =====================
the change                              the event                    ``type``
======================================  ===========================  =====================
running → failed                        ``AuditFailed``              ``audit.failed``
running → completed                     ``AuditCompleted``           ``audit.completed``
failed → completed (a decision undone)  ``AuditCompleted``           ``audit.overturned``
failed → running                        ``AuditRestored``            ``audit.restored``
a decision held by the brake            ``AuditFailureHeld``         ``audit.failure_held``
the held decision released              ``AuditFailureReleased``     ``audit.failure_released``
the held decision discarded             ``AuditFailureDiscarded``    ``audit.failure_discarded``
======================================  ===========================  =====================

An audit starting is no outcome: the product started it.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Final, Literal, get_args

from pydantic import BaseModel, ConfigDict

from statemachine.audit import AuditState
from statemachine.events import AuditEvent, derived_id
from statemachine.machine import INITIAL

__all__ = ["OUTCOME_TYPES", "Outcome", "OutcomeType", "outcome", "outcome_id"]

OutcomeType = Literal[
    "audit.failed",
    "audit.completed",
    "audit.overturned",
    "audit.restored",
    "audit.failure_held",
    "audit.failure_released",
    "audit.failure_discarded",
]
OUTCOME_TYPES: Final[tuple[str, ...]] = get_args(OutcomeType)

_BY_STATUS: Final[dict[tuple[str, str], OutcomeType]] = {
    ("running", "failed"): "audit.failed",
    ("running", "completed"): "audit.completed",
    ("failed", "completed"): "audit.overturned",
    ("failed", "running"): "audit.restored",
}
_HOLD_ENDED: Final[dict[str, OutcomeType]] = {
    "AuditFailureReleased": "audit.failure_released",
    "AuditFailureDiscarded": "audit.failure_discarded",
}


class Outcome(BaseModel):
    """One entry of the outcome feed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    """Derived from the causing event: the same change is the same id, on every delivery."""
    type: OutcomeType
    audit_id: str
    status: str
    """The audit's status after the change."""
    error_code: str | None = None
    """For a failure, held or made: the classified cause."""
    rule: str | None = None
    """For a reconciler decision: the rule that fired."""
    reconciled_by: str | None = None
    """For a reconciler decision: what asked for the probe behind it (watchdog, on_demand,
    subscription)."""
    actor: str | None = None
    """Who made the change: an operator's actor (`token:<name>`, `cli:<user>`), else who
    decided (`workflow`, `reconciler`, `operator`), else none."""
    decided_at: datetime
    """When the change was made (the causing event's `occurred_at`)."""
    event_id: uuid.UUID
    """The causing event's id, in the audit's history (`auditrec replay`)."""


def outcome_id(audit_id: str, event_id: uuid.UUID) -> str:
    """The id of the entry ``event_id`` of ``audit_id`` causes (the idempotency key's)."""
    return f"out_{derived_id(f'{audit_id}/{event_id}', 'outcome').hex}"


def outcome(before: AuditState, event: AuditEvent, after: AuditState) -> Outcome | None:
    """The entry ``event`` makes, taking the audit from ``before`` to ``after``; ``None`` when
    it changed neither the status nor the held decision (or started the audit)."""
    kind: OutcomeType | None = None
    if before.status != after.status:
        kind = None if before.status == INITIAL else _BY_STATUS.get((before.status, after.status))
    elif before.held_decision_id is None and after.held_decision_id is not None:
        kind = "audit.failure_held"
    elif before.held_decision_id is not None and after.held_decision_id is None:
        kind = _HOLD_ENDED.get(event.type, "audit.failure_discarded")
    if kind is None:
        return None
    data: Any = event.data
    decision: Any = getattr(data, "decision", None) or data  # a hold carries the decision
    return Outcome(
        id=outcome_id(event.audit_id, event.event_id),
        type=kind,
        audit_id=event.audit_id,
        status=after.status,
        error_code=getattr(decision, "error_code", None),
        rule=getattr(decision, "rule", None),
        reconciled_by=_text(getattr(decision, "reconciled_by", None)),
        actor=getattr(data, "actor", None) or _text(getattr(decision, "failed_by", None)),
        decided_at=event.occurred_at,
        event_id=event.event_id,
    )


def _text(value: object) -> str | None:
    return None if value is None else str(getattr(value, "value", value))
