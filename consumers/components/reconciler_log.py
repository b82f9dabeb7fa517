"""How the reconciler reads its partitions: the events it only folds (read as views), its own
decisions (and the records that may be one, told by their header), and terminal states kept
compact."""

from __future__ import annotations

from typing import Final

from pydantic import BaseModel

from consumers.eventlog.codec import decode, read
from consumers.eventlog.port import Record
from statemachine.events import AuditEvent, AuditFailed, AuditFailureHeld, FailedBy
from statemachine.machine import TERMINAL
from statemachine.rules import PRODUCER
from statemachine.state import AuditState

__all__ = ["FOLDED_ONLY", "compact", "decode_to_judge", "may_be_decision", "own_decision"]

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

_FOLDED_ONLY_HEADERS: Final = frozenset(kind.encode() for kind in FOLDED_ONLY)


def decode_to_judge(record: Record) -> AuditEvent:
    """The record's event, or :class:`~statemachine.errors.DecodeError`: a view of it
    (:func:`~consumers.eventlog.codec.read`, a third of the cost) when the reconciler only folds
    it, the model when a rule may judge it (rules tell events apart by class). The
    ``event-type`` header spares reading as a view an event that then needs the model; a header
    that is absent or wrong costs a second decoding, never a wrong class."""
    for key, value in record.headers:
        if key == "event-type":
            if value not in _FOLDED_ONLY_HEADERS:
                return decode(record.value)
            break
    event = read(record.value)
    if event.type in FOLDED_ONLY or isinstance(event, BaseModel):
        return event
    return decode(record.value)


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
