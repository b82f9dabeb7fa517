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
from datetime import UTC, datetime, timedelta
from typing import Any

from projections.row import COLUMN_KINDS, AuditRow
from projections.values import HistoryEntry
from statemachine.events import AuditEvent
from statemachine.idempotency import Key

__all__ = [
    "CHANGE_POLL",
    "ENDED_SQL",
    "LATEST",
    "SORTS",
    "UNSET",
    "AuditReads",
    "ended_at",
    "sort_key",
    "url_prefixes",
]

CHANGE_POLL = 0.005  # seconds between looks when a store cannot notify

# The orders of a list of audits; each a keyset (its key, then ``audit_id``):
#   started  started_at
#   ended    when it ended (completed or failed): ``ended_at``; an unfinished audit last
#   status   status, then started_at
#   age      how long it ran: from its start to its end, or to ``now`` while unfinished
SORTS: tuple[str, ...] = ("started", "ended", "status", "age")
# The end an unfinished audit sorts by: last in either direction.
UNSET = datetime(1, 1, 2, tzinfo=UTC)
LATEST = datetime(9999, 12, 30, tzinfo=UTC)
# A start URL searched without a scheme is also looked for under these.
_SCHEMES = ("https://", "http://")


# When an audit ended: its completion's time, or its failure's where the row keeps that apart.
ENDED_COLUMNS: tuple[str, ...] = tuple(
    c for c in ("completed_at", "failed_at") if c in COLUMN_KINDS
)
ENDED_SQL = f"COALESCE({', '.join(ENDED_COLUMNS)})" if len(ENDED_COLUMNS) > 1 else ENDED_COLUMNS[0]


def ended_at(row: AuditRow) -> datetime | None:
    """When the audit ended: completed, or failed (:data:`ENDED_COLUMNS`)."""
    for column in ENDED_COLUMNS:
        value: datetime | None = getattr(row.state, column)
        if value is not None:
            return value
    return None


def sort_key(row: AuditRow, sort: str, descending: bool, now: datetime | None) -> tuple[Any, ...]:
    """The row's keyset in the order ``sort``: the values :meth:`AuditReads.list_audits`
    takes as ``after`` (the audit id last)."""
    state = row.state
    if sort == "ended":
        end = ended_at(row)
        return (end if end is not None else (UNSET if descending else LATEST), row.audit_id)
    if sort == "status":
        return (state.status, state.started_at, row.audit_id)
    if sort == "age":
        end = ended_at(row) or now
        age = end - state.started_at if end and state.started_at else timedelta(0)
        return (age, row.audit_id)
    return (state.started_at, row.audit_id)


def url_prefixes(q: str) -> list[tuple[str, str]]:
    """The ranges ``[low, high)`` of start URLs that begin with ``q`` (and, for a ``q`` with
    no scheme, with ``https://`` or ``http://`` and ``q``): byte order, so a b-tree on the
    URL finds them."""
    starts = [q] if "://" in q else [q, *(scheme + q for scheme in _SCHEMES)]
    ranges = []
    for start in starts:
        last = ord(start[-1])
        if last < 0x10FFFF and not 0xD7FF <= last < 0xE000:
            ranges.append((start, start[:-1] + chr(last + 1)))
    return ranges


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
        after: tuple[Any, ...] | None = None,
        shadow: bool = False,
        held: bool | None = None,
        q: str | None = None,
        workflow: str | None = None,
        default_workflow: str | None = None,
        stalled: bool | None = None,
        sort: str = "started",
        descending: bool = True,
        backwards: bool = False,
        now: datetime | None = None,
    ) -> list[AuditRow]:
        """Of ``status``, ``project`` (id), error ``code``, started before ``started_before``,
        held by the brake or not (``held``), matching the search ``q`` (:func:`url_prefixes`),
        each when given, in the order of ``sort`` (:data:`SORTS`; newest first by default).
        ``after`` is the keyset cursor: :func:`sort_key` of the last row of the previous page;
        ``backwards`` walks the other way from it (the rows before, nearest first: the previous
        page, reversed). ``now`` ends the ages of unfinished audits (``sort="age"``).
        ``shadow``: only audits still running whose history holds an ``AuditFailureSimulated``
        (shadow mode would have failed them). ``workflow``: only audits of this workflow; when
        it is ``default_workflow`` (``AUDITREC_CLOUDFLARE_WORKFLOW``), audits that name no
        workflow (``NULL``) too. ``stalled``: only audits with a stall verdict recorded
        (``stalled_at`` set; a running audit's), or only the others."""

    @abstractmethod
    async def count_audits(
        self,
        *,
        status: str | None = None,
        project: str | None = None,
        code: str | None = None,
        started_before: datetime | None = None,
        shadow: bool = False,
        held: bool | None = None,
        q: str | None = None,
        workflow: str | None = None,
        default_workflow: str | None = None,
        stalled: bool | None = None,
    ) -> int:
        """How many audits :meth:`list_audits` selects with the same filters (every page)."""

    @abstractmethod
    async def workflows(self, limit: int = 100) -> list[str]:
        """The workflows audits name (``workflow`` set), each once, in the index's order, at
        most ``limit``: each found by the ``audits_workflow`` index, never a scan of the
        table."""

    @abstractmethod
    async def count_stalled(self) -> int:
        """Running audits with a stall verdict recorded (``stalled_at`` set)."""

    @abstractmethod
    async def count_retention_at_risk(self, seen_before: datetime) -> int:
        """Running audits last observed before ``seen_before``, or never observed and started
        before it: their instance may have ended that long ago, its error soon deleted by
        Cloudflare's retention."""

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
    async def recorded_times(
        self, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], datetime]:
        """When each event named by ``(audit_id, event_id)`` was recorded (its history row's
        ``recorded_at``); an event not recorded has no key."""

    @abstractmethod
    async def terminations_requested(self, since: datetime) -> int:
        """Audits whose instance's termination auditrec asked for (for a stall) at or after
        ``since``, whatever became of them: the brake's sliding window counts them."""

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
