"""The watchdog: each tick, request probes for stale running audits.

Selection (DESIGN §4, §5): running audits started more than ``STALE_RUNNING_AFTER`` ago, never
observed first, then least recently observed, then oldest, at most ``WATCHDOG_BATCH_LIMIT``.
With bulk discovery (:mod:`consumers.workflows.discovery`) a tick looks at up to
``WATCHDOG_BULK_LIMIT`` of them: it reads which of their instances their workflow's listing
shows alive (one listing per workflow, :class:`Listings`), and each request carries that
(``data.listed``), so the probe asks the API only about the others. The audits of a workflow
whose listing fails (or is not worth it) are asked for alone, at most ``WATCHDOG_BATCH_LIMIT``
of them.
Every probe attempt — an observation or a failed probe — moves an audit to the back of the
queue, so audits that can never be resolved (a workflow that runs for days, an API that keeps
failing for one instance) cannot starve the rest. One tick runs at a time across processes
(the store's watchdog lock), and a periodic tick happens once per ``WATCHDOG_INTERVAL`` across
all processes: each interval slot (wall clock) is claimed through the store by one of them.

A sweep large enough for the mass-failure brake is recorded as open before its requests go out;
the watchdog then judges it (:class:`~consumers.components.brake.Brake`) once its answers are
in, and judges any sweep past its deadline whose judge went away.

The orphan scan (:mod:`consumers.components.orphans`) runs in the watchdog's steps when its
interval is due, sharing the pages of the same step's listings when they reach back far enough.
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
from consumers.components.orphans import OrphanScan
from consumers.components.retention import Retention
from consumers.eventlog.codec import encode
from consumers.eventlog.port import EventLog
from consumers.runtime.component import Component
from consumers.runtime.metrics import (
    AUDITS,
    AUDITS_RETENTION_AT_RISK,
    AUDITS_STALE_RUNNING,
    AUDITS_STALLED,
    OLDEST_RUNNING_AGE,
    STALL_CHECKS,
    WATCHDOG_CANDIDATES,
    WATCHDOG_LAST_TICK,
    WATCHDOG_REQUESTS,
    WATCHDOG_TICK_DURATION,
    WATCHDOG_TICKS,
)
from consumers.workflows.answers import ProbeFailure
from consumers.workflows.discovery import MARGIN, Discovery, Listing
from projections.row import AuditRow
from projections.store import ProjectionStore
from statemachine.errors import EventLogError
from statemachine.events import Listed, ProbeRequested, ProbeRequestedData, Progress, Trigger
from statemachine.machine import INITIAL, STATES
from statemachine.policy import Policy
from statemachine.vocabulary import LISTED_ALIVE_STATUSES

__all__ = ["PRODUCER", "Listings", "Tick", "Watchdog", "probe_requests"]

PRODUCER = "auditrec-watchdog"
REPORT_EVERY = 30.0  # seconds between refreshes of the brake's gauges
WINDOW_EVERY = 5.0  # seconds between judgments of the brake's sliding window
log = structlog.get_logger("auditrec.watchdog")


@dataclass(frozen=True)
class Listings:
    """A tick's instance listings, one per workflow listed (an audit's workflow ``None`` is
    ``default``), each with the ``created_on`` its window begins at (``listed_from``)."""

    default: str
    by_workflow: dict[str, Listing] = field(default_factory=dict)
    listed_from: dict[str, datetime] = field(default_factory=dict)

    def get(self, workflow: str | None) -> Listing | None:
        """The listing of ``workflow`` (``None``: the default one), if it was listed."""
        return self.by_workflow.get(workflow or self.default)

    @property
    def requests(self) -> int:
        return sum(listing.requests for listing in self.by_workflow.values())


@dataclass(frozen=True)
class Tick:
    sweep_id: str
    at: datetime
    candidates: list[AuditRow]
    requests: list[ProbeRequested] = field(default_factory=list)
    skipped: bool = False  # another process held the lock
    listings: Listings | None = None


def probe_requests(
    rows: list[AuditRow],
    trigger: Trigger,
    at: datetime,
    sweep_id: str | None = None,
    producer: str = PRODUCER,
    answer_by: datetime | None = None,
    listing: Listing | Listings | None = None,
    actor: str | None = None,
    on_behalf_of: str | None = None,
    progress: Mapping[str, Progress] | None = None,
) -> list[ProbeRequested]:
    """``listing``: what a listing says of each row's instance (:class:`Listings`: looked up
    in the row's workflow's); ``progress``: the audits to check for a stall, with the progress
    the check stands on (each is read with its steps, never from the listing)."""
    size = len(rows) if sweep_id is not None else None
    progress = progress or {}

    def listed(row: AuditRow) -> Listed | None:
        instance = row.state.workflow_instance_id
        found = listing.get(row.state.workflow) if isinstance(listing, Listings) else listing
        status = found.alive.get(instance) if found and instance else None
        if found is None or status is None or row.audit_id in progress:
            return None
        return Listed(status=status, at=found.at)

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
        orphans: OrphanScan | None = None,
        cloudflare_retention: timedelta = timedelta(days=7),
    ) -> None:
        """``policy``: the stall rule's (its checks are asked for only when it is on);
        ``fresh()``: whether the projection holds what the log holds (stall checks pause
        while it does not); ``orphans``: the orphan scan, run when its interval is due."""
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
        self.orphans = orphans
        # How long Cloudflare keeps an ended instance (AUDITREC_CLOUDFLARE_RETENTION).
        self.cloudflare_retention = cloudflare_retention

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

    async def _listing(self, rows: list[AuditRow]) -> Listings | None:
        """The alive instances among ``rows``' from their workflows' listings (one per
        workflow, where it is cheaper than asking for each); ``None`` without any (each audit
        is then asked for alone)."""
        if self.discovery is None:
            return None
        listings = Listings(self.discovery.client.workflow)
        starts: dict[str, list[datetime | None]] = {}
        for r in rows:
            if r.state.workflow_instance_id:
                starts.setdefault(r.state.workflow or listings.default, []).append(
                    r.state.started_at
                )
        within = (self.answer_within or timedelta(seconds=60)).total_seconds() / 2
        # When an orphan scan is due, a listing that is read anyway reaches back to when the
        # workflow began to be watched: the scan then reads no page of its own for it.
        watched: dict[str, datetime] = {}
        if self.orphans is not None and self.orphans.due():
            watched = await self.store.orphans.watched()
        for workflow, times in starts.items():
            known = [t for t in times if t is not None]
            if len(times) <= len(LISTED_ALIVE_STATUSES) or not known:
                continue
            since = min(known)
            if workflow in watched:
                since = min(since, watched[workflow] + MARGIN)
            listing = await self.discovery.alive_since(since, within, workflow=workflow)
            if isinstance(listing, ProbeFailure):
                log.warning(
                    "instance listing failed: probing audits one at a time",
                    workflow=workflow,
                    reason=listing.reason.value,
                    detail=listing.detail[:200],
                    batch_limit=self.batch_limit,
                )
                continue
            listings.by_workflow[workflow] = listing
            listings.listed_from[workflow] = since - MARGIN
        return listings if listings.by_workflow else None

    def _within_batch(self, rows: list[AuditRow], listings: Listings | None) -> list[AuditRow]:
        """``rows``, those of a workflow not listed cut to ``batch_limit`` (each is asked for
        alone)."""
        if listings is None:
            return rows[: self.batch_limit]
        alone = [r.audit_id for r in rows if listings.get(r.state.workflow) is None]
        kept = set(alone[: self.batch_limit])
        return [r for r in rows if listings.get(r.state.workflow) is not None or r.audit_id in kept]

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
            and r.state.held_decision_id is None  # a held decision waits for its verdict
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
            rows = self._within_batch(rows, listing)
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
        return Tick(sweep_id, now, rows, requests, listings=listing)

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
        """Refresh the gauges of the audits (by status, stale, the oldest running's age, the
        stalled, those whose instance's error Cloudflare's retention may soon delete), of the
        dead letters kept and of the open orphans."""
        now = self.clock()
        counts = await self.store.audits.count_by_status()
        for status in (s for s in STATES if s != INITIAL):
            AUDITS.labels(status).set(counts.get(status, 0))
        stale, oldest = await self.store.audits.running_summary(now - self.stale_after)
        AUDITS_STALE_RUNNING.set(stale)
        OLDEST_RUNNING_AGE.set(max((now - oldest).total_seconds(), 0.0) if oldest else 0.0)
        AUDITS_STALLED.set(await self.store.audits.count_stalled())
        unseen_since = now - self.cloudflare_retention / 2
        AUDITS_RETENTION_AT_RISK.set(await self.store.audits.count_retention_at_risk(unseen_since))
        try:
            await self.dead_letters.refresh()
        except EventLogError as exc:  # the next refresh tries again; the audits' are set
            log.warning("dead letters not counted", error=str(exc)[:300])
        if self.orphans is not None:
            await self.orphans.report()

    async def step(self) -> int:
        judged = len(await self.judge())
        await self.retain()
        if time.monotonic() - self._audits_reported_at >= REPORT_EVERY:
            self._audits_reported_at = time.monotonic()
            await self.report()
        if not self.due():
            await self.scan_orphans()
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
            await self.scan_orphans()
            return 0  # another process ticks this interval
        tick = await self.tick()
        await self.scan_orphans(tick)
        return len(tick.requests)

    async def scan_orphans(self, tick: Tick | None = None) -> None:
        """The orphan scan, when its interval is due here, given ``tick``'s listings (of this
        step) so that it spends no request on what they show."""
        if self.orphans is None or not self.orphans.due():
            return
        listings = tick.listings if tick is not None else None
        await self.orphans.scan(
            self.clock(),
            listings.by_workflow if listings is not None else None,
            listings.listed_from if listings is not None else None,
        )

    async def burst(self) -> None:
        await self.tick()

    async def settle(self) -> int:
        # After a drain every answer that is coming is in: judge what is open.
        return len(await self.judge(force=True))
