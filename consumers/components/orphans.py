"""The orphan scan: instances of the watched workflows that no audit holds (DESIGN §10).

An orphan is an instance listed alive (``queued``, ``running``, ``paused``, ``waiting``) in a
watched workflow, that no audit holds (by instance id, any status), created at least
``AUDITREC_INSTANCE_LOST_GRACE`` ago (a publisher may attach its instance late) and after
auditrec began watching the workflow (``watched_workflows.since``, registered by ``auditrec
init``, at ``serve`` start, and here: on a first deployment every older instance has no audit
yet, and none of them is called an orphan). It costs money, and nothing will ever finish it.

A scan runs at most once per ``AUDITREC_ORPHAN_INTERVAL`` across processes (the interval's slot
is claimed through the store, as the watchdog claims its ticks), only while the projection
holds what the log holds (a table behind the log would miss audits and call their instances
orphans). Per workflow it reads the alive instances created since the watch began: from the
watchdog's listing of the same step when that listing reaches back that far (no request of its
own), else by paging the listing itself, spender ``orphans`` of the shared probe budget. A
listing that fails ends that workflow's scan with a warning, and nothing is marked gone. The
store records what the listing shows (:meth:`~projections.orphans.OrphanInstances.record_scan`):
new orphans, and open ones not listed alive any more (gone, or adopted by an audit).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import structlog

from consumers.runtime.metrics import ORPHAN_SCAN_PAGES, ORPHANS
from consumers.workflows.answers import ProbeFailure
from consumers.workflows.client import WorkflowsClient
from consumers.workflows.discovery import Listing
from consumers.workflows.ratelimit import ORPHANS as ORPHANS_SPENDER
from projections.store import ProjectionStore
from projections.values import OrphanScanRecord, OrphanSighting
from statemachine.events import ProbeFailureReason
from statemachine.vocabulary import LISTED_ALIVE_STATUSES

__all__ = ["TICK", "OrphanScan", "ScanListing"]

TICK = "orphans"  # the name the scan's interval slots are claimed under
NOT_FRESH_RETRY = 10.0  # seconds before a scan the projection held back looks again
log = structlog.get_logger("auditrec.orphans")


@dataclass(frozen=True)
class ScanListing:
    """A workflow's alive instances as one scan read them: status and ``created_on`` of each,
    when the listing was begun, and the pages it requested (none when shared)."""

    alive: dict[str, str]
    created: dict[str, datetime]
    at: datetime
    pages: int
    shared: bool = False


class OrphanScan:
    """Scans ``workflows`` for orphans through ``client``; ``fresh()`` says whether the
    projection holds what the log holds (a scan waits until it does)."""

    def __init__(
        self,
        store: ProjectionStore,
        client: WorkflowsClient,
        *,
        workflows: Sequence[str],
        grace: timedelta,
        interval: timedelta,
        owner: str,
        fresh: Callable[[], Awaitable[bool]] | None = None,
        within: float = 30.0,
        per_page: int = 100,
        max_pages: int = 2000,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.store = store
        self.client = client
        self.workflows = tuple(dict.fromkeys(workflows))
        self.grace = grace
        self.interval = interval
        self.owner = owner
        self.fresh = fresh
        self.within = within
        self.per_page = per_page
        self.max_pages = max_pages
        self.clock = clock
        self._slot = -1
        self._retry_at = 0.0
        self.scans = 0  # scans this process ran (claimed)

    def _slot_of(self, now: datetime) -> int:
        return int(now.timestamp() // max(self.interval.total_seconds(), 0.001))

    def due(self, now: datetime | None = None) -> bool:
        """Whether this interval's slot has not been looked at here yet."""
        if self.interval <= timedelta(0) or time.monotonic() < self._retry_at:
            return False
        return self._slot_of(now or self.clock()) != self._slot

    async def scan(
        self,
        now: datetime,
        listings: Mapping[str, Listing] | None = None,
        listed_from: Mapping[str, datetime] | None = None,
    ) -> dict[str, OrphanScanRecord] | None:
        """Scan every watched workflow, once per interval across processes: ``None`` when
        another process has scanned this interval (or the projection is behind the log: then
        it looks again shortly). ``listings``: the watchdog's listings of this step, each used
        when it reaches back to the watch's start (``listed_from``: the ``created_on`` each
        begins at). What each workflow's record changed; a workflow whose listing failed is
        left out."""
        slot = self._slot_of(now)
        if self.fresh is not None and not await self.fresh():
            log.info("orphan scan waits: the projection is behind the log")
            self._retry_at = time.monotonic() + NOT_FRESH_RETRY
            return None
        claimed = await self.store.coordination.claim_tick(TICK, slot, self.owner)
        self._slot = slot  # looked at (a claim that raised is tried again at the next step)
        if not claimed:
            return None  # another process scans this interval
        self.scans += 1
        watched = await self.store.orphans.watch(self.workflows, now)
        records: dict[str, OrphanScanRecord] = {}
        for workflow in self.workflows:
            since = watched[workflow]
            given = (listings or {}).get(workflow)
            begins = (listed_from or {}).get(workflow)
            shared = given is not None and begins is not None and begins <= since
            record = await self._scan_workflow(workflow, since, now, given if shared else None)
            if record is not None:
                records[workflow] = record
        return records

    async def _scan_workflow(
        self, workflow: str, since: datetime, now: datetime, shared: Listing | None
    ) -> OrphanScanRecord | None:
        newest = now - self.grace
        if newest < since:  # watched for less than the grace: nothing can be an orphan yet
            ORPHANS.labels(workflow).set(0)
            return None
        if shared is not None:
            listing: ScanListing | ProbeFailure = ScanListing(
                dict(shared.alive), dict(shared.created), shared.at, 0, shared=True
            )
        else:
            listing = await self._list(workflow, since)
        if isinstance(listing, ProbeFailure):
            log.warning(
                "orphan scan: listing failed, nothing marked gone",
                workflow=workflow,
                reason=listing.reason.value,
                detail=listing.detail[:200],
            )
            return None
        window = {
            instance: (status, created)
            for instance, status in listing.alive.items()
            if (created := listing.created.get(instance)) is not None and since <= created <= newest
        }
        held = await self.store.orphans.held(sorted(window))
        found = [
            OrphanSighting(instance, status, created)
            for instance, (status, created) in sorted(window.items())
            if instance not in held
        ]
        record = await self.store.orphans.record_scan(workflow, found, listing.at)
        ORPHANS.labels(workflow).set(record.open)
        log.info(
            "orphan scan",
            workflow=workflow,
            listed_alive=len(listing.alive),
            in_window=len(window),
            orphans=record.open,
            found=len(record.found),
            gone=len(record.gone),
            adopted=len(record.adopted),
            pages=listing.pages,
            shared_listing=listing.shared,
        )
        return record

    async def _list(self, workflow: str, since: datetime) -> ScanListing | ProbeFailure:
        """The workflow's alive instances created since ``since``, paged here (spender
        ``orphans``): at most ``max_pages`` pages within ``within`` seconds."""
        at = self.clock()
        deadline = time.monotonic() + self.within
        alive: dict[str, str] = {}
        created: dict[str, datetime] = {}
        pages = 0
        for status in LISTED_ALIVE_STATUSES:
            cursor: str | None = None
            cursors: set[str] = set()
            while True:
                if pages >= self.max_pages:
                    return _failure(f"the listing is longer than {self.max_pages} pages")
                page = await self.client.list_instances(
                    status=status,
                    date_start=since,
                    per_page=self.per_page,
                    cursor=cursor,
                    workflow=workflow,
                    wait=max(deadline - time.monotonic(), 0.0),
                    spender=ORPHANS_SPENDER,
                )
                pages += 1
                ORPHAN_SCAN_PAGES.labels(workflow).inc()
                if isinstance(page, ProbeFailure):
                    return page
                for item in page.items:
                    if item.status in LISTED_ALIVE_STATUSES:  # whatever filter the API applied
                        alive[item.id] = item.status
                        if item.created_on is not None:
                            created[item.id] = item.created_on
                if page.cursor is None:
                    break
                if page.cursor in cursors:
                    return _failure(f"the listing's cursor {page.cursor[:40]!r} came back")
                cursors.add(page.cursor)
                cursor = page.cursor
        return ScanListing(alive, created, at, pages)

    async def report(self) -> None:
        """Refresh the open orphans' gauge from the store (whichever process scanned)."""
        counts = await self.store.orphans.open_counts()
        for workflow in {*self.workflows, *counts}:
            ORPHANS.labels(workflow).set(counts.get(workflow, 0))


def _failure(detail: str) -> ProbeFailure:
    return ProbeFailure(ProbeFailureReason.INVALID_RESPONSE, None, detail)
