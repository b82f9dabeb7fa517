"""The values the projection store's ports take and give: where an event was read
(``Position``), what applying a batch did, a history entry, the schema's state, and the shared
state's answers: a request slot of the Workflows API budget, an open watchdog sweep, the
mass-failure brake.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from statemachine.events import AuditEvent

__all__ = [
    "ApplyResult",
    "BrakeState",
    "HistoryEntry",
    "OpenSweep",
    "ParkedEntry",
    "Position",
    "RequestSlot",
    "SchemaState",
]

Position = tuple[str, int, int]  # topic, partition, offset


@dataclass(frozen=True, slots=True)
class SchemaState:
    """What a database holds, read without connecting a store (starting a store creates or
    migrates its schema): the schema version found (``None``: never initialised) and the
    version this release makes."""

    found: int | None
    current: int


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    event: AuditEvent
    position: Position | None
    recorded_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """What applying a batch did: events ``applied``, ``skipped`` (recorded before: their key
    already named the same content), and the ``conflicts``: each refused event's index in the
    batch and the reason (:func:`statemachine.idempotency.conflict_reason`)."""

    applied: int
    skipped: int
    conflicts: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True, slots=True)
class RequestSlot:
    """The answer to taking one request of a shared budget: ``granted``, or why not — a pause
    until ``paused_until`` (a 429), or a full window (``share_spent``: the spender's share of
    it; ``reserved``: all of it but the part reserved for another spender) whose oldest
    request leaves at ``frees_at``."""

    granted: bool
    paused_until: datetime | None = None
    frees_at: datetime | None = None
    share_spent: bool = False
    reserved: bool = False


@dataclass(frozen=True, slots=True)
class OpenSweep:
    """A watchdog sweep awaiting the mass-failure brake's verdict: the ids of the probe
    requests it made, and when it must be judged with whatever answers are in."""

    sweep_id: str
    requests: tuple[str, ...]
    at: datetime
    deadline: datetime


@dataclass(frozen=True, slots=True)
class BrakeState:
    """The mass-failure brake: engaged (since, by which sweep, with what counts), or not —
    and how it last ended (``released`` / ``discarded``, by whom, when)."""

    engaged: bool = False
    since: datetime | None = None
    sweep_id: str | None = None
    lost: int = 0
    observations: int = 0
    ended_at: datetime | None = None
    ended_by: str | None = None
    how: str | None = None


@dataclass(frozen=True, slots=True)
class ParkedEntry:
    """An outcome entry parked on an endpoint (:mod:`projections.deliveries`): the body as
    delivered (the same bytes on every retry), where its audit's events are (the lifecycle
    partition whose consumer retries it), how it failed, and whether an operator asked for its
    retry (by whom, when)."""

    endpoint: str
    outcome_id: str
    audit_id: str
    partition: int
    body: str
    attempts: int
    error: str
    parked_at: datetime
    seq: int = 0
    """Its place among the parked entries (assigned when parked; the audit's order)."""
    retry_requested_at: datetime | None = None
    retry_requested_by: str | None = None
