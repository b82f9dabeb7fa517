"""How the reconciler reads its partitions: the events it only folds, its own decisions (and
the records that may be one, told by their header), and terminal states kept compact."""

from __future__ import annotations

from typing import Final

from consumers.eventlog.port import Record
from statemachine.events import AuditEvent, AuditFailed, AuditFailureHeld, FailedBy
from statemachine.machine import TERMINAL
from statemachine.rules import PRODUCER
from statemachine.state import AuditState

__all__ = ["FOLDED_ONLY", "compact", "may_be_decision", "own_decision"]

_SHARED: dict[tuple[str, str | None], AuditState] = {}


def compact(state: AuditState) -> AuditState:
    """Terminal audits only need their status (and who failed them, for overturns)."""
    if state.status not in TERMINAL:
        return state
    key = (state.status, state.failed_by)
    shared = _SHARED.get(key)
    if shared is None:
        shared = _SHARED[key] = AuditState(audit_id="", status=key[0], failed_by=key[1])
    return shared


# Event types no rule judges and that are no decision: the reconciler only folds them.
FOLDED_ONLY: Final = frozenset(
    {
        "AuditStarted",
        "AuditProgressed",
        "AuditCompleted",
        "WorkflowInstanceAttached",
        "AuditRestored",
    }
)


def own_decision(event: AuditEvent) -> bool:
    if isinstance(event, AuditFailureHeld):
        return event.producer == PRODUCER
    return isinstance(event, AuditFailed) and event.data.failed_by is FailedBy.RECONCILER


def may_be_decision(record: Record) -> bool:
    """Cheap pre-check on the ``event-type`` header (absent header: decode to be sure)."""
    for key, value in record.headers:
        if key == "event-type":
            return value in (b"AuditFailed", b"AuditFailureHeld")
    return True
