"""The values the projection store's ports take and give: where an event was read
(``Position``), what applying a batch did, a history entry, the schema's state, and the shared
state's answers: a request slot of the Workflows API budget, an open watchdog sweep, the
mass-failure brake, a parked outcome entry, an orphan instance and its history.
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
    "Orphan",
    "OrphanEvent",
    "OrphanScanRecord",
    "OrphanSighting",
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


@dataclass(frozen=True, slots=True)
class OrphanSighting:
    """An instance a scan saw listed alive that no audit holds (:mod:`projections.orphans`)."""

    instance_id: str
    status: str
    """Its listed status."""
    created_on: datetime


@dataclass(frozen=True, slots=True)
class Orphan:
    """An instance of a watched workflow that no audit holds (:mod:`projections.orphans`):
    when it was created, the status it was last listed with, when scans first and last saw
    it, and its ``state``: ``open`` (listed alive at the last scan), ``gone`` (not listed
    alive any more, or an audit holds it now) or ``terminated``. The termination fields are
    those of the latest termination asked for: by whom (``terminated_by``, the actor, and
    ``on_behalf_of``), when it was answered and how (``result``: ``terminated``,
    ``already_ended``, ``not_found``, ``failed: <detail>``; ``None`` while unanswered)."""

    workflow: str
    instance_id: str
    created_on: datetime
    status: str
    first_seen: datetime
    last_seen: datetime
    state: str
    terminated_at: datetime | None = None
    terminated_by: str | None = None
    on_behalf_of: str | None = None
    result: str | None = None
    seq: int = 0
    """Its place among the orphans (assigned when first found; pages follow it)."""


@dataclass(frozen=True, slots=True)
class OrphanEvent:
    """One entry of an orphan's history (append-only): ``kind`` is ``found``, ``seen`` (listed
    with another status), ``gone``, ``adopted`` (an audit holds it now), ``terminate_asked``
    (by ``actor``, for ``on_behalf_of``), or a termination's answer: ``terminated``,
    ``already_ended``, ``not_found``, ``failed`` (``detail`` says why)."""

    workflow: str
    instance_id: str
    at: datetime
    kind: str
    actor: str | None = None
    on_behalf_of: str | None = None
    detail: str | None = None
    seq: int = 0


@dataclass(frozen=True, slots=True)
class OrphanScanRecord:
    """What recording a scan of a workflow changed: the instances found (new, or open again),
    those gone, those an audit holds now (gone too), and how many are open after it."""

    found: list[str]
    gone: list[str]
    adopted: list[str]
    open: int
