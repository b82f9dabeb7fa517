"""The read model port: the ``audits`` rows and their ``audit_events`` history, as the projector
left them, and a way to wait until it writes again.

Users: the HTTP API and the CLI (``consumers/operations``: outcomes, listing, the overview,
backtests, freshness), the watchdog (stale running audits, counts) and the mass-failure brake
(the history of an audit, the events a sweep caused). Every method is a read.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import datetime

from projections.row import AuditRow
from projections.values import HistoryEntry
from statemachine.events import AuditEvent
from statemachine.idempotency import Key

__all__ = ["CHANGE_POLL", "AuditReads"]

CHANGE_POLL = 0.005  # seconds between looks when a store cannot notify


class AuditReads(ABC):
    @abstractmethod
    async def get(self, audit_id: str) -> AuditRow | None: ...

    @abstractmethod
    async def holding(self, instance_ids: Sequence[str]) -> dict[str, AuditRow]:
        """The audits whose current workflow instance is one of ``instance_ids``, by instance
        id (an instance no audit holds is absent; of two audits holding one instance, the one
        started last). An indexed look-up: the event subscription asks it for every batch."""

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
    async def recorded(self, events: Sequence[AuditEvent]) -> dict[Key, AuditEvent]:
        """The recorded events that share a key ``(audit_id, event_id)`` with ``events``, by
        key (:mod:`statemachine.idempotency`): to tell a duplicate from a conflict."""

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
        """Failed audits whose failure (``failed_at``) is at or after ``since``, counted by
        (``error_code``, ``reconciled_by``); ``reconciled_by`` is ``None`` for failures not
        found by reconciliation (the workflow's own, an operator's)."""

    @abstractmethod
    async def running_summary(self, started_before: datetime) -> tuple[int, datetime | None]:
        """Running audits started before ``started_before`` (stale), and when the oldest
        running audit started (``None`` when none runs)."""

    @abstractmethod
    def iter_rows(self) -> AsyncIterator[AuditRow]:
        """Every row, in audit id order."""

    async def changed(self, timeout: float) -> None:
        """Return soon after any writer (in any process) applies a batch, or after
        ``timeout`` seconds, whichever comes first — so a reader waiting for an outcome
        looks again when there may be one. This default polls; an adapter with
        notifications (PostgreSQL ``LISTEN``) wakes at once."""
        await asyncio.sleep(min(timeout, CHANGE_POLL))

    @abstractmethod
    async def failures_by_hour(self, since: datetime) -> dict[tuple[datetime, str], int]:
        """Failed audits whose failure (``failed_at``) is at or after ``since``, counted by
        (the UTC hour it fell in, ``error_code``): the hour is its start, an aware UTC
        datetime; an hour with no failure has no key."""
