"""The projection store port: the ``audits`` table, its ``audit_events`` history, and the
small amount of shared state the services keep beside them.

Two adapters implement it, ``sqlite/`` and ``postgres/``; both pass
``tests/contracts/projection_store.py``. The values it takes and gives are ``values.py``'s.

:meth:`ProjectionStore.apply` is the projector's one write: rows, history and the consumed
offsets in one transaction; an ``event_id`` already in the history is skipped, so a
redelivered batch changes nothing. Everything else is a read, or bookkeeping for the watchdog
lock, process heartbeats and sent telemetry.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime

from projections.row import AuditRow
from projections.values import (
    ApplyResult,
    BrakeState,
    HistoryEntry,
    OpenSweep,
    Position,
    RequestSlot,
)
from statemachine.events import AuditEvent
from statemachine.longlived import LongLived

__all__ = ["ProjectionStore"]

CHANGE_POLL = 0.005  # seconds between looks when a store cannot notify


class ProjectionStore(LongLived, ABC):
    """``async with`` starts and stops it; both idempotent."""

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def stop(self) -> None: ...

    @abstractmethod
    async def init(self) -> int:
        """Create or upgrade the schema (idempotent); returns the schema version."""

    @abstractmethod
    async def ping(self) -> None: ...

    # -- the projector's write ------------------------------------------------------------

    @abstractmethod
    async def apply(
        self,
        events: Sequence[tuple[AuditEvent, Position]],
        offsets: Mapping[tuple[str, int], int],
        consumer: str,
        bodies: Sequence[bytes | None] | None = None,
    ) -> ApplyResult:
        """Fold ``events`` into rows and history and store ``offsets`` (next offset per
        topic-partition) for ``consumer``, in one transaction. Events already in the history
        (by ``event_id``) are skipped.

        ``bodies``, parallel to ``events``, may give an event's JSON as read from the log when
        it is valid current-version JSON of that very event
        (:func:`consumers.eventlog.codec.decode_verbatim`); the history stores it instead of
        serialising the event again. ``None`` entries are serialised."""

    @abstractmethod
    async def stored_offsets(self, consumer: str) -> dict[tuple[str, int], int]: ...

    async def changed(self, timeout: float) -> None:
        """Return soon after any writer (in any process) applies a batch, or after
        ``timeout`` seconds, whichever comes first — so a reader waiting for an outcome
        looks again when there may be one. This default polls; an adapter with
        notifications (PostgreSQL ``LISTEN``) wakes at once."""
        await asyncio.sleep(min(timeout, CHANGE_POLL))

    @abstractmethod
    async def reset(self, consumer: str) -> None:
        """Empty rows, history and ``consumer``'s offsets (for a rebuild)."""

    # -- a rebuild over a trimmed log ---------------------------------------------------------

    @abstractmethod
    async def keep_history(self, before: Mapping[tuple[str, int], int]) -> int:
        """Set aside the history recorded at positions before ``before`` (per topic and
        partition: what a trimmed log no longer holds), adding to what an interrupted rebuild
        set aside; returns how many events are set aside in all. It survives :meth:`reset`."""

    @abstractmethod
    async def kept_history(self, after: int, limit: int) -> list[tuple[int, bytes, Position]]:
        """Up to ``limit`` set-aside events in the order they were projected, after the
        ``after``-th: ``(number, JSON body, position)``."""

    @abstractmethod
    async def drop_kept_history(self) -> None:
        """Forget what was set aside (the rebuild that needed it is done)."""

    # -- reads ----------------------------------------------------------------------------

    @abstractmethod
    async def get(self, audit_id: str) -> AuditRow | None: ...

    @abstractmethod
    async def list_audits(
        self,
        *,
        status: str | None = None,
        project: str | None = None,
        code: str | None = None,
        started_before: datetime | None = None,
        limit: int = 100,
        after: tuple[datetime, str] | None = None,
        shadow: bool = False,
    ) -> list[AuditRow]:
        """Newest first (``started_at`` desc, ``audit_id`` desc), of ``status``, ``project``
        (id), error ``code``, started before ``started_before``, each when given; ``after`` is
        the keyset cursor: the (started_at, audit_id) of the last row of the previous page.
        ``shadow``: only audits still running whose history holds an ``AuditFailureSimulated``
        (shadow mode would have failed them)."""

    @abstractmethod
    async def history(self, audit_id: str) -> list[HistoryEntry]:
        """The audit's events in log order."""

    async def histories(self, audit_ids: Sequence[str]) -> dict[str, list[HistoryEntry]]:
        """The histories of several audits (each in log order; an unknown audit has none), for
        reads over many audits (a backtest). This default asks for each in turn; the adapters
        read a few hundred audits a query."""
        return {audit_id: await self.history(audit_id) for audit_id in audit_ids}

    @abstractmethod
    async def caused_by(self, causation_ids: Iterable[str]) -> list[AuditEvent]:
        """Recorded events whose ``causation_id`` is one of ``causation_ids``."""

    @abstractmethod
    async def stale_running(self, started_before: datetime, limit: int) -> list[AuditRow]:
        """Running audits started before ``started_before``: never observed first, then least
        recently observed, then oldest."""

    @abstractmethod
    async def count_by_status(self) -> dict[str, int]: ...

    @abstractmethod
    async def failure_counts(self, since: datetime) -> dict[tuple[str, str | None], int]:
        """Failed audits whose failure (``completed_at``) is at or after ``since``, counted by
        (``error_code``, ``reconciled_by``); ``reconciled_by`` is ``None`` for failures not
        found by reconciliation (the workflow's own, an operator's)."""

    @abstractmethod
    async def running_summary(self, started_before: datetime) -> tuple[int, datetime | None]:
        """Running audits started before ``started_before`` (stale), and when the oldest
        running audit started (``None`` when none runs)."""

    @abstractmethod
    def iter_rows(self) -> AsyncIterator[AuditRow]:
        """Every row, in audit id order."""

    # -- coordination ---------------------------------------------------------------------

    @abstractmethod
    def watchdog_lock(self) -> AbstractAsyncContextManager[bool]:
        """Held by one watchdog tick at a time across processes; yields False when another
        holder has it (the tick is then skipped)."""

    @abstractmethod
    async def heartbeat(self, process: str, components: Sequence[str], now: datetime) -> None: ...

    @abstractmethod
    async def live_components(self, since: datetime) -> dict[str, list[str]]:
        """Components with a heartbeat after ``since`` → processes running them."""

    @abstractmethod
    async def forget_process(self, process: str) -> None: ...

    @abstractmethod
    async def claim_tick(self, name: str, slot: int, owner: str) -> bool:
        """Claim slot ``slot`` (an interval's number) of the periodic job ``name``: True for
        exactly one claimant across processes; later claims of the same slot get False."""

    @abstractmethod
    async def held_audits(self, limit: int | None = None) -> list[AuditRow]:
        """Running audits with a decision held by the mass-failure brake, oldest hold first."""

    # -- checkpoints of stateful consumers ---------------------------------------------------

    @abstractmethod
    async def save_checkpoint(
        self, consumer: str, topic: str, partition: int, next_offset: int, state: bytes
    ) -> None:
        """Keep ``state``, the consumer's state of one partition folded up to (not including)
        ``next_offset``, replacing the one kept before."""

    @abstractmethod
    async def load_checkpoint(
        self, consumer: str, topic: str, partition: int
    ) -> tuple[int, bytes] | None:
        """The last checkpoint kept for the partition: ``(next_offset, state)``."""

    @abstractmethod
    async def checkpoint_offsets(self, consumer: str, topic: str) -> dict[int, int]:
        """The ``next_offset`` of each partition's checkpoint (what retention may trim)."""

    # -- the mass-failure brake -------------------------------------------------------------

    @abstractmethod
    async def open_sweep(
        self, sweep_id: str, requests: Sequence[str], at: datetime, deadline: datetime
    ) -> None:
        """Record a sweep whose decisions await a verdict (idempotent by ``sweep_id``)."""

    @abstractmethod
    async def open_sweeps(self) -> list[OpenSweep]:
        """Sweeps without a verdict, oldest first."""

    @abstractmethod
    async def claim_sweep(self, sweep_id: str, owner: str, now: datetime, lease_s: float) -> bool:
        """Claim the judging of an open sweep for ``lease_s`` seconds: True for one claimant
        at a time; a claim whose lease ran out (its holder died) can be taken over."""

    @abstractmethod
    async def close_sweep(
        self, sweep_id: str, verdict: str, lost: int, observations: int, now: datetime
    ) -> None:
        """Record the verdict (``released`` or ``held``); the sweep is no longer open."""

    @abstractmethod
    async def brake(self) -> BrakeState: ...

    @abstractmethod
    async def engage_brake(self, sweep_id: str, lost: int, observations: int, at: datetime) -> bool:
        """Engage the brake; True when it was not engaged before (an engaged brake keeps the
        sweep that engaged it)."""

    @abstractmethod
    async def end_brake(self, how: str, actor: str, at: datetime) -> BrakeState:
        """Disengage the brake (``how``: ``released`` or ``discarded``); returns the state it
        had before."""

    # -- the Workflows API's budget, shared by every process probing one account -------------

    @abstractmethod
    async def take_request_slot(
        self, account: str, now: datetime, budget: int, window_s: float
    ) -> RequestSlot:
        """Take one of ``budget`` requests per sliding ``window_s`` seconds for ``account``,
        unless ``account`` is paused at ``now``."""

    @abstractmethod
    async def pause_requests(self, account: str, until: datetime) -> None:
        """Pause every request of ``account`` until ``until`` (a later pause wins)."""

    @abstractmethod
    async def requests_paused_until(self, account: str, now: datetime) -> datetime | None: ...

    @abstractmethod
    async def requests_in_window(self, account: str, now: datetime, window_s: float) -> int: ...

    # -- telemetry bookkeeping ------------------------------------------------------------

    @abstractmethod
    async def telemetry_sent(self, event_ids: Iterable[str]) -> set[str]: ...

    @abstractmethod
    async def mark_telemetry_sent(self, event_id: str, at: datetime) -> None: ...
