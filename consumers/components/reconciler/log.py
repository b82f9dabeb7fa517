"""How the reconciler reads its partitions: an event folded into its audit's state (terminal
states kept compact, held decisions kept aside), once per key ``(audit_id, event_id)``
(:mod:`consumers.components.keys`), a partition's states rebuilt on assignment (from its
checkpoint and the log), events read as views (all but the holds it keeps), its own decisions
(and the records that may be one, told by their header)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, cast

import structlog

from consumers.components.checkpoints import Checkpoints
from consumers.components.keys import Keys, first_seen, settled
from consumers.eventlog.codec import decode
from consumers.eventlog.port import EventLog, Record
from consumers.eventlog.wire import decode_view
from statemachine.errors import DecodeError
from statemachine.events import AuditEvent, AuditFailed, AuditFailureHeld, FailedBy
from statemachine.machine import INITIAL, RUNNING, TERMINAL
from statemachine.rules import PRODUCER
from statemachine.state import AuditState, evolve, initial

__all__ = [
    "FOLDED_ONLY",
    "MODELS_ONLY",
    "Holds",
    "Rebuilt",
    "compact",
    "decode_to_judge",
    "fold_into",
    "may_be_decision",
    "own_decision",
    "rebuild_partition",
]

log = structlog.get_logger("auditrec.reconciler")

Holds = dict[str, AuditFailureHeld]  # held decisions of a partition, by audit (while held)

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

# Event types the reconciler needs as models: it keeps a held decision, and copies it
# (``model_copy``) when it is released. It reads every other event as a view: the rules, the
# state machine and ``own_decision`` tell events apart by ``type``.
MODELS_ONLY: Final = frozenset({"AuditFailureHeld", "AuditFailureReleased"})


# Decisions told apart by their producer: a hold, a stall reported (or a shadow decision), a
# termination requested.
_OWN_BY_PRODUCER: Final = frozenset(
    {"AuditFailureHeld", "AuditFailureSimulated", "WorkflowTerminationRequested"}
)
_DECISION_TYPES: Final = frozenset({b"AuditFailed", *(t.encode() for t in _OWN_BY_PRODUCER)})


def decode_to_judge(record: Record) -> AuditEvent:
    """The record's event, or :class:`~statemachine.errors.DecodeError`: a view of it
    (:func:`~consumers.eventlog.codec.read`) unless its type is one of ``MODELS_ONLY``, then
    the model (a second decoding, for a rare event)."""
    value = record.value
    view = decode_view(value)
    if view is None or view.type in MODELS_ONLY:
        return decode(value)
    return cast(AuditEvent, view)


def own_decision(event: AuditEvent) -> bool:
    """Whether ``event`` (a model or a view) is a decision of the reconciler's: a failure it
    decided, or a failure it held."""
    kind = event.type
    if kind in _OWN_BY_PRODUCER:
        return event.producer == PRODUCER
    return kind == "AuditFailed" and cast(AuditFailed, event).data.failed_by is FailedBy.RECONCILER


def may_be_decision(record: Record) -> bool:
    """Cheap pre-check on the ``event-type`` header (absent header: decode to be sure)."""
    for key, value in record.headers:
        if key == "event-type":
            return value in _DECISION_TYPES
    return True


def fold_into(
    states: dict[str, AuditState], holds: Holds, event: AuditEvent, current: AuditState | None
) -> AuditState:
    """Fold ``event`` into ``current``, its audit's state in ``states`` (``None``: unknown),
    and keep the result there (compact when terminal) and the held decision in ``holds``."""
    audit_id = event.audit_id
    if current is None:
        current = initial(audit_id)
    elif current.audit_id == "":  # a compacted terminal audit: status and failed_by only
        current = current._replace(audit_id=audit_id)
    new = evolve(current, event)
    status = new.status
    if status == RUNNING:
        states[audit_id] = new
    elif status != INITIAL:
        states[audit_id] = compact(new)
    if new.held_decision_id is None:
        if current.held_decision_id is not None:
            holds.pop(audit_id, None)
    elif type(event) is AuditFailureHeld and new.held_decision_id == str(event.event_id):
        holds[audit_id] = event
    return new


@dataclass(frozen=True)
class Rebuilt:
    """A partition's states as of its committed offset, and how they were made."""

    states: dict[str, AuditState]
    holds: Holds
    read: int
    """Records read from the log."""
    checkpoint: int | None
    """Where the checkpoint it started from ends (``None``: none, from the log's start)."""
    keys: Keys
    """The event ids folded into each audit that can still change."""


async def rebuild_partition(
    event_log: EventLog,
    checkpoints: Checkpoints | None,
    tp: tuple[str, int],
    start: int,
    log_start: int,
) -> Rebuilt:
    """The states of partition ``tp`` committed up to ``start``: its latest checkpoint, then
    the log folded from there; past ``start``, only our own decisions (committed with their
    offsets, so final), folded early as the live path folds a decision it makes. ``log_start``
    is the partition's first offset still in the log (a gap is logged, never hidden)."""
    restored = await checkpoints.load(tp, start) if checkpoints is not None else None
    states: dict[str, AuditState] = {}
    holds: Holds = {}
    keys: Keys = {}
    begin = 0
    if restored is not None:
        states = {k: compact(v) for k, v in restored.states.items()}
        holds, begin, keys = restored.holds, restored.next_offset, restored.keys
    if log_start > begin:
        log.error(
            "the lifecycle log no longer holds what this partition's state needs",
            partition=tp[1],
            needed_from=begin,
            log_starts_at=log_start,
            fix="keep the topic's retention.ms=-1 and set "
            "AUDITREC_KAFKA_LIFECYCLE_RETENTION: auditrec then trims only past checkpoints",
        )
    count = 0
    async for batch in event_log.inspection.read(tp[0], tp[1], begin, None):
        count += len(batch)
        for record in batch:
            if record.offset >= start and not may_be_decision(record):
                continue
            try:
                event = decode_to_judge(record)
            except DecodeError:
                continue
            if (record.offset < start or own_decision(event)) and first_seen(keys, event):
                after = fold_into(states, holds, event, states.get(event.audit_id))
                settled(keys, event.audit_id, after)
    return Rebuilt(
        states, holds, count, restored.next_offset if restored is not None else None, keys
    )
