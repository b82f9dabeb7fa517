"""The watchdog: each tick, request probes for stale running audits.

Selection (DESIGN §4, §5): running audits started more than ``STALE_RUNNING_AFTER`` ago, never
observed first, then least recently observed, then oldest, at most ``WATCHDOG_BATCH_LIMIT``.
With bulk discovery (:mod:`consumers.workflows.discovery`) a tick looks at up to
``WATCHDOG_BULK_LIMIT`` of them: it reads which of their instances the workflow's listing shows
alive, and each request carries that (``data.listed``), so the probe asks the API only about the
others. When the listing fails, the tick falls back to ``WATCHDOG_BATCH_LIMIT`` audits, each
asked for alone.
Every probe attempt — an observation or a failed probe — moves an audit to the back of the
queue, so audits that can never be resolved (a workflow that runs for days, an API that keeps
failing for one instance) cannot starve the rest. One tick runs at a time across processes
(the store's watchdog lock), and a periodic tick happens once per ``WATCHDOG_INTERVAL`` across
all processes: each interval slot (wall clock) is claimed through the store by one of them.

A sweep large enough for the mass-failure brake is recorded as open before its requests go out;
the watchdog then judges it (:class:`~consumers.components.brake.Brake`) once its answers are
in, and judges any sweep past its deadline whose judge went away.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import structlog

from consumers.components.brake import Brake, SweepVerdict, sweep_deadline
from consumers.components.deadletters import DeadLetterCount
from consumers.components.retention import Retention
from consumers.eventlog.codec import encode
from consumers.eventlog.port import EventLog
from consumers.runtime.component import Component
from consumers.runtime.metrics import (
    AUDITS,
    AUDITS_STALE_RUNNING,
    OLDEST_RUNNING_AGE,
    STALL_CHECKS,
    WATCHDOG_CANDIDATES,
    WATCHDOG_LAST_TICK,
    WATCHDOG_REQUESTS,
    WATCHDOG_TICK_DURATION,
    WATCHDOG_TICKS,
)
from consumers.workflows.answers import ProbeFailure
from consumers.workflows.discovery import Discovery, Listing
from projections.row import AuditRow
from projections.store import ProjectionStore
from statemachine.errors import EventLogError
from statemachine.events import Listed, ProbeRequested, ProbeRequestedData, Progress, Trigger
from statemachine.machine import INITIAL, STATES
from statemachine.policy import Policy
from statemachine.vocabulary import LISTED_ALIVE_STATUSES

__all__ = ["PRODUCER", "Tick", "Watchdog", "probe_requests"]

PRODUCER = "auditrec-watchdog"
REPORT_EVERY = 30.0  # seconds between refreshes of the brake's gauges
WINDOW_EVERY = 5.0  # seconds between judgments of the brake's sliding window
log = structlog.get_logger("auditrec.watchdog")


@dataclass(frozen=True)
class Tick:
    sweep_id: str
    at: datetime
    candidates: list[AuditRow]
    requests: list[ProbeRequested] = field(default_factory=list)
    skipped: bool = False  # another process held the lock


def probe_requests(
    rows: list[AuditRow],
    trigger: Trigger,
    at: datetime,
    sweep_id: str | None = None,
    producer: str = PRODUCER,
    answer_by: datetime | None = None,
    listing: Listing | None = None,
    actor: str | None = None,
    on_behalf_of: str | None = None,
    progress: Mapping[str, Progress] | None = None,
) -> list[ProbeRequested]:
    """``progress``: the audits to check for a stall, with the progress the check stands on
    (each is read with its steps, never from the listing)."""
    size = len(rows) if sweep_id is not None else None
    progress = progress or {}

    def listed(row: AuditRow) -> Listed | None:
        instance = row.state.workflow_instance_id
        status = listing.alive.get(instance) if listing and instance else None
        if listing is None or status is None or row.audit_id in progress:
            return None
        return Listed(status=status, at=listing.at)

    return [
        ProbeRequested(
            event_id=uuid.uuid4(),
            audit_id=row.audit_id,
            occurred_at=at,
            producer=producer,
            correlation_id=None,
            data=ProbeRequestedData(
                workflow_instance_id=row.state.workflow_instance_id,
                trigger=trigger,
                sweep_id=sweep_id,
                sweep_size=size,
                answer_by=answer_by,
                listed=listed(row),
                actor=actor,
                on_behalf_of=on_behalf_of,
                workflow=row.state.workflow,
                progress=progress.get(row.audit_id),
            ),
        )
        for row in rows
    ]


class Watchdog(Component):
    name = "watchdog"

    def __init__(
        self,
        event_log: EventLog,
        store: ProjectionStore,
        *,
        stale_after: timedelta,
        interval: timedelta,
        batch_limit: int,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        ready: Callable[[], Awaitable[bool]] | None = None,
        ready_within: float = 60.0,
        owner: str | None = None,
        answer_within: timedelta | None = None,
        brake: Brake | None = None,
        discovery: Discovery | None = None,
        retention: Retention | None = None,
        confirming: Callable[[], Awaitable[set[str]]] | None = None,
        policy: Policy | None = None,
        fresh: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        """``policy``: the stall rule's (its checks are asked for only when it is on);
        ``fresh()``: whether the projection holds what the log holds (stall checks pause
        while it does not)."""
        self.log = event_log
        self.policy = policy
        self.fresh = fresh
        self.store = store
        self.stale_after = stale_after
        self.interval = interval
        self.batch_limit = batch_limit
        self.clock = clock
        self._next = 0.0
        self.ticks = 0
        # The first tick waits (bounded) until ``ready()``: a projector starting in the same
        # process catches up first, so the tick does not select from a stale table.
        self.ready = ready
        self._ready_by = time.monotonic() + ready_within
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        # How long a tick's probes may wait for the API (a 429 pause): the sweep's bound.
        self.answer_within = answer_within
        self.brake = brake
        self.discovery = discovery
        self.retention = retention
        # The audits whose death the event subscription reported and whose confirming probe
        # waits for the budget: one probe pending per audit, so a tick leaves them out.
        self.confirming = confirming
        self._retained_slot = -1
        self._judged_at = 0.0
        self._window_judged_at = -WINDOW_EVERY
        self.opened: set[str] = set()  # sweeps this watchdog opened and has not seen judged
        self._reported_at = -REPORT_EVERY
        self._audits_reported_at = -REPORT_EVERY
        self.dead_letters = DeadLetterCount(event_log)

    async def candidates(
        self, now: datetime | None = None, leave_out: frozenset[str] = frozenset()
    ) -> list[AuditRow]:
        """The stale running audits a tick looks at: up to the discovery's limit when the
        listing can be used, else ``batch_limit``; none of ``leave_out``."""
        now = now or self.clock()
        limit = max(self.discovery.limit if self.discovery is not None else 0, self.batch_limit)
        rows = await self.store.audits.stale_running(now - self.stale_after, limit + len(leave_out))
        return [r for r in rows if r.audit_id not in leave_out][:limit]

    async def _confirming(self) -> frozenset[str]:
        """The audits a confirmation is pending for (a probe each already): left out."""
        if self.confirming is None:
            return frozenset()
        try:
            return frozenset(await self.confirming())
        except EventLogError as exc:  # then a few audits may be asked about twice
            log.warning("pending confirmations not read", error=str(exc)[:300])
            return frozenset()

    async def _listing(self, rows: list[AuditRow]) -> Listing | None:
        """The alive instances among ``rows``' from the workflow's listing, when it is cheaper
        than asking for each; ``None`` without it (each audit is then asked for alone)."""
        starts = [r.state.started_at for r in rows if r.state.workflow_instance_id]
        if self.discovery is None or len(starts) <= len(LISTED_ALIVE_STATUSES):
            return None
        within = (self.answer_within or timedelta(seconds=60)).total_seconds() / 2
        since = min(s for s in starts if s is not None)
        listing = await self.discovery.alive_since(since, within)
        if isinstance(listing, ProbeFailure):
            log.warning(
                "instance listing failed: probing audits one at a time",
                reason=listing.reason.value,
                detail=listing.detail[:200],
                batch_limit=self.batch_limit,
            )
            return None
        return listing

    async def _stall_checks(self, rows: list[AuditRow], now: datetime) -> dict[str, Progress]:
        """The audits of a tick to check for a stall (DESIGN §10), each with its latest
        progress as auditrec recorded it: running, attached, silent for ``stalled_after``,
        not reported stalled already (unless its instance is to be terminated and still
        runs). None while the projection is behind the log: its progress could be older
        than what was published."""
        policy = self.policy
        if policy is None or not policy.stalls_on:
            return {}
        wanted = [
            r
            for r in rows
            if r.state.workflow_instance_id
            and r.state.progress_event_id
            and (r.state.stalled_at is None or policy.may_terminate(r.state.workflow))
        ]
        if not wanted:
            return {}
        if self.fresh is not None and not await self.fresh():
            log.info("stall checks paused: the projection is behind the log")
            STALL_CHECKS.labels("paused").inc(len(wanted))
            return {}
        keys = [(r.audit_id, r.state.progress_event_id or "") for r in wanted]
        recorded = await self.store.audits.recorded_times(keys)
        silent = sorted(
            (at, audit_id, event_id)
            for audit_id, event_id in keys
            if (at := recorded.get((audit_id, event_id))) is not None
            and now - at >= policy.stalled_after
        )
        # Each check is a request of its own: at most a batch a tick, the longest silent
        # first (the rest are asked on later ticks, as observed audits go to the back).
        checks = {
            audit_id: Progress(event_id=uuid.UUID(event_id), recorded_at=at)
            for at, audit_id, event_id in silent[: self.batch_limit]
        }
        STALL_CHECKS.labels("asked").inc(len(checks))
        return checks

    async def tick(self, *, dry_run: bool = False, trigger: Trigger = Trigger.WATCHDOG) -> Tick:
        now = self.clock()
        sweep_id = f"sweep-{now.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
        if dry_run:
            return Tick(sweep_id, now, await self.candidates(now))
        started = time.perf_counter()
        async with self.store.coordination.watchdog_lock() as held:
            if not held:
                log.info("tick skipped: another watchdog holds the lock")
                WATCHDOG_TICKS.labels("skipped").inc()
                return Tick(sweep_id, now, [], skipped=True)
            rows = await self.candidates(now, await self._confirming())
            listing = await self._listing(rows)
            if listing is None:
                rows = rows[: self.batch_limit]
            answer_by = now + self.answer_within if self.answer_within is not None else None
            progress = await self._stall_checks(rows, now)
            requests = probe_requests(
                rows,
                trigger,
                now,
                sweep_id,
                answer_by=answer_by,
                listing=listing,
                progress=progress,
            )
            if self.brake is not None and self.brake.watches(len(requests)):
                deadline = sweep_deadline(now, self.answer_within)
                await self.brake.open(sweep_id, [str(r.event_id) for r in requests], deadline)
                self.opened.add(sweep_id)
            if requests:
                topic = self.log.topics.probe_requests
                await self.log.append([encode(topic, r) for r in requests])
        self.ticks += 1
        listed = sum(1 for r in requests if r.data.listed)
        WATCHDOG_TICKS.labels("ticked").inc()
        WATCHDOG_TICK_DURATION.observe(time.perf_counter() - started)
        WATCHDOG_CANDIDATES.set(len(rows))
        WATCHDOG_REQUESTS.labels("listing").inc(listed)
        WATCHDOG_REQUESTS.labels("instance").inc(len(requests) - listed)
        WATCHDOG_LAST_TICK.set(time.time())
        log.info(
            "tick",
            sweep_id=sweep_id,
            candidates=len(rows),
            listed_alive=None if listing is None else listed,
            listing_requests=None if listing is None else listing.requests,
        )
        return Tick(sweep_id, now, rows, requests)

    def due(self) -> bool:
        return time.monotonic() >= self._next

    async def judge(self, *, force: bool = False) -> list[SweepVerdict]:
        """Give the brake's verdict on open sweeps whose answers are in or whose deadline
        passed (at most once a second); ``force``: on this watchdog's own open sweeps, with
        the answers that are in."""
        if self.brake is None or (not force and time.monotonic() - self._judged_at < 1.0):
            return []
        self._judged_at = time.monotonic()
        if force:
            verdicts = await self.brake.judge_due(force=True, only=self.opened)
        else:
            verdicts = await self.brake.judge_due()
            if time.monotonic() - self._window_judged_at >= WINDOW_EVERY:
                self._window_judged_at = time.monotonic()
                await self.brake.judge_window()
            if time.monotonic() - self._reported_at >= REPORT_EVERY:
                self._reported_at = time.monotonic()
                if not verdicts:  # a verdict reports already
                    await self.brake.report()  # the brake's gauges, for /metrics
        self.opened &= self.brake.still_open  # judged here or elsewhere: no longer ours to do
        return verdicts

    async def retain(self) -> None:
        """Trim the lifecycle log as retention allows, once per its period across processes."""
        if self.retention is None:
            return
        period = self.retention.every.total_seconds()
        slot = int(self.clock().timestamp() // period)
        if slot == self._retained_slot:
            return
        self._retained_slot = slot
        if not await self.store.coordination.claim_tick("retention", slot, self.owner):
            return
        try:
            await self.retention.trim()
        except Exception as exc:  # the next period tries again; nothing is lost meanwhile
            log.warning("lifecycle log not trimmed", error=str(exc)[:300])

    async def report(self) -> None:
        """Refresh the gauges of the audits (by status, stale, the oldest running's age) and
        of the dead letters kept."""
        now = self.clock()
        counts = await self.store.audits.count_by_status()
        for status in (s for s in STATES if s != INITIAL):
            AUDITS.labels(status).set(counts.get(status, 0))
        stale, oldest = await self.store.audits.running_summary(now - self.stale_after)
        AUDITS_STALE_RUNNING.set(stale)
        OLDEST_RUNNING_AGE.set(max((now - oldest).total_seconds(), 0.0) if oldest else 0.0)
        try:
            await self.dead_letters.refresh()
        except EventLogError as exc:  # the next refresh tries again; the audits' are set
            log.warning("dead letters not counted", error=str(exc)[:300])

    async def step(self) -> int:
        judged = len(await self.judge())
        await self.retain()
        if time.monotonic() - self._audits_reported_at >= REPORT_EVERY:
            self._audits_reported_at = time.monotonic()
            await self.report()
        if not self.due():
            return judged
        first = self.ticks == 0 and self.ready is not None and time.monotonic() < self._ready_by
        if first and self.ready is not None and not await self.ready():
            return 0
        # Ticks are claimed per interval slot (wall clock) through the store, so with any
        # number of processes each interval has one tick; each process looks again when the
        # next slot begins.
        now = self.clock().timestamp()
        period = max(self.interval.total_seconds(), 0.001)
        slot = int(now // period)
        self._next = time.monotonic() + (slot + 1) * period - now
        if not await self.store.coordination.claim_tick(self.name, slot, self.owner):
            return 0  # another process ticks this interval
        tick = await self.tick()
        return len(tick.requests)

    async def burst(self) -> None:
        await self.tick()

    async def settle(self) -> int:
        # After a drain every answer that is coming is in: judge what is open.
        return len(await self.judge(force=True))
