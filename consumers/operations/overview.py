"""What the console's overview shows, gathered in one place: audits by status, recent failures
by error code and by how they were found (and per hour and code, for the charts), running
audits past the stale threshold, those with a stall verdict recorded, the mass-failure brake
and its held decisions, the event subscription's backlog, the outcome feed's endpoints and the
entries parked on them, and how the components are doing.

Every figure is one indexed query on the projection store (no scan of the table), so the page
stays cheap however many audits there are.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from consumers.components.confirmer import confirmations_waiting
from consumers.operations.backends import Backends
from consumers.operations.service import Operations
from projections.row import AuditRow
from statemachine.errors import EventLogError

__all__ = ["WINDOWS", "Overview", "gather_overview"]

# The failure windows shown, by label.
WINDOWS: tuple[tuple[str, timedelta], ...] = (
    ("24 h", timedelta(hours=24)),
    ("7 d", timedelta(days=7)),
)
STALE_SHOWN = 50  # stale running audits listed (the count covers them all)


@dataclass(frozen=True)
class Overview:
    now: datetime
    by_status: dict[str, int]
    # window label -> (error code, reconciled_by or None) -> count
    failures: dict[str, dict[tuple[str, str | None], int]]
    stale_after: timedelta
    stale_total: int
    stale: list[AuditRow]
    brake: dict[str, Any]
    components: dict[str, tuple[str, int]]  # this process: name -> (state, lag)
    live: dict[str, list[str]]  # component -> the processes running it (recent heartbeats)
    # The outcome feed (Operations.deliveries): its endpoints (name, target, types, parked
    # count, whether configured here) and how many entries are parked on them all.
    outcomes: dict[str, Any]
    # The event subscription, when a queue is configured: its queue id, the confirmations
    # waiting for the budget, and this process's warning about its last pull (if any).
    subscription: dict[str, Any] | None = None
    # window label -> (UTC hour start, error code) -> failures since the window's start
    hourly: dict[str, dict[tuple[datetime, str], int]] = field(default_factory=dict)
    stalled_total: int = 0  # running audits with a stall verdict recorded

    def failure_codes(self, window: str) -> list[tuple[str, int]]:
        """Failures in ``window`` by error code, most first."""
        totals: dict[str, int] = {}
        for (code, _), n in self.failures[window].items():
            totals[code] = totals.get(code, 0) + n
        return sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))

    def failure_finders(self, window: str) -> list[tuple[str, int]]:
        """Failures in ``window`` by ``reconciled_by`` (``-`` when not found by
        reconciliation: the workflow's own failures, an operator's), most first."""
        totals: dict[str, int] = {}
        for (_, by), n in self.failures[window].items():
            totals[by or "-"] = totals.get(by or "-", 0) + n
        return sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))


async def gather_overview(ops: Operations) -> Overview:
    backends: Backends = ops.backends
    store = backends.store
    now = backends.now()
    stale_after = backends.settings.stale_running_after
    cutoff = now - stale_after
    by_status, stale, summary, brake, live, deliveries, *by_window = await asyncio.gather(
        store.audits.count_by_status(),
        store.audits.stale_running(cutoff, STALE_SHOWN),
        store.audits.running_summary(cutoff),
        ops.brake_status(),
        backends.live_components(reuse=True),
        ops.deliveries(limit=1),  # the counts per endpoint; one parked entry read, not shown
        *(store.audits.failure_counts(now - span) for _, span in WINDOWS),
        *(store.audits.failures_by_hour(now - span) for _, span in WINDOWS),
    )
    failures, hourly = by_window[: len(WINDOWS)], by_window[len(WINDOWS) :]
    # The watchdog's order (never observed first) suits a sweep; a reader wants the oldest first.
    stale.sort(key=lambda r: (r.state.started_at or now, r.audit_id))
    return Overview(
        now=now,
        by_status=by_status,
        failures={label: counts for (label, _), counts in zip(WINDOWS, failures, strict=True)},
        stale_after=stale_after,
        stale_total=summary[0],
        stale=stale,
        brake=brake,
        components=backends.health.snapshot(),
        live=live,
        outcomes={
            "endpoints": deliveries["endpoints"],
            "total": deliveries["total"],
            "configured": any(e["configured"] for e in deliveries["endpoints"]),
        },
        subscription=await _subscription(backends),
        hourly={label: counts for (label, _), counts in zip(WINDOWS, hourly, strict=True)},
        stalled_total=await store.audits.count_stalled(),
    )


async def _subscription(backends: Backends) -> dict[str, Any] | None:
    queue_id = backends.settings.cloudflare_queue_id
    if queue_id is None:
        return None
    try:
        waiting: int | None = await confirmations_waiting(backends.log)
    except EventLogError:
        waiting = None
    warnings = [w for w in backends.health.warnings() if w.startswith("subscriber:")]
    return {"queue_id": queue_id, "waiting": waiting, "warning": warnings[0] if warnings else None}
