"""A sweep: one watchdog tick now, on request (``auditrec sweep``, ``POST /sweep``), its
outcomes awaited. With a serve running the pipeline the requests go through the log and the
answers are awaited in the projection; without one, ``inline`` runs the pipeline here.

The brake's verdict on the sweep is given as soon as its answers are in, by whichever of this
process and the serve's watchdogs gets there first (the store lets one of them).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

import structlog

from consumers.components.brake import Brake
from consumers.components.watchdog import Watchdog
from consumers.operations.backends import Backends
from consumers.operations.freshness import Freshness
from consumers.operations.outcomes import Summary, await_outcomes
from consumers.runtime.metrics import SWEEP_DURATION
from projections.audits import AuditReads
from statemachine.errors import NoServer

__all__ = ["sweep"]

log = structlog.get_logger("auditrec")


class Operations(Protocol):
    """What a sweep uses of :class:`~consumers.operations.service.Operations`."""

    backends: Backends
    freshness: Freshness

    def brake(self) -> Brake: ...

    async def pipeline_live(self, *, reuse: bool = False) -> bool: ...

    async def missing(self) -> list[str]: ...

    async def run_inline(self) -> None: ...

    def watching(
        self, what: str, progress: Callable[[int, int], None] | None
    ) -> Callable[[int, int], Awaitable[None]]: ...


async def sweep(
    ops: Operations,
    *,
    dry_run: bool = False,
    inline: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> Summary:
    s = ops.backends.settings
    watchdog = Watchdog(
        ops.backends.log,
        ops.backends.store,
        stale_after=s.stale_running_after,
        interval=s.watchdog_interval,
        batch_limit=s.watchdog_batch_limit,
        answer_within=s.sweep_wait,
        brake=ops.brake(),
        discovery=await ops.backends.discovery(),
        policy=ops.backends.policy,
        cloudflare_retention=s.cloudflare_retention,
    )
    if dry_run:
        tick = await watchdog.tick(dry_run=True)
        return Summary(
            candidates=len(tick.candidates),
            sweep_id=tick.sweep_id,
            candidate_rows=tick.candidates,
        )
    live = await ops.pipeline_live()
    if not live and not inline:
        missing = ", ".join(await ops.missing())
        raise NoServer(
            f"no running `auditrec serve` runs {missing}: start `auditrec serve` "
            "(or run this sweep in-process with `auditrec sweep --inline`)"
        )
    started = time.monotonic()
    if not live:
        await ops.run_inline()  # catch the projection up before selecting
    else:  # select from a table that has everything published before this sweep
        await ops.freshness.wait(min(s.sweep_wait.total_seconds(), 30.0))
    tick = await watchdog.tick()
    if not live and tick.requests:
        await ops.run_inline()
        if await watchdog.judge(force=True):  # the answers are all in: the verdict
            await ops.run_inline()  # the reconciler acts on released holds
    wait = s.sweep_wait.total_seconds() if live else 5.0
    judging = (
        asyncio.create_task(_judge(watchdog, ops.backends.store.audits))
        if watchdog.opened
        else None
    )
    try:
        watch = ops.watching("this sweep", progress) if live else None
        outcomes = await await_outcomes(
            ops.backends.store, tick.requests, ops.backends.policy, timeout=wait, watch=watch
        )
    finally:
        if judging is not None:
            judging.cancel()
            await asyncio.gather(judging, return_exceptions=True)
    elapsed = time.monotonic() - started
    SWEEP_DURATION.observe(elapsed)
    store = ops.backends.store
    brake = await store.brake.state()
    return Summary(
        brake={
            "engaged": brake.engaged,
            "since": brake.since.isoformat().replace("+00:00", "Z") if brake.since else None,
            "sweep_id": brake.sweep_id if brake.engaged else None,
            "held": len(await store.brake.held_audits()),
        },
        candidates=len(tick.candidates),
        candidate_rows=tick.candidates,
        outcomes=outcomes,
        sweep_id=tick.sweep_id,
        elapsed_s=elapsed,
        skipped=tick.skipped,
    )


async def _judge(watchdog: Watchdog, audits: AuditReads) -> None:
    """Give the brake's verdict on this sweep as soon as its answers are in (a serve's
    watchdog may do it first; the store lets one of them): looked at again when the
    projection changes, at least every second."""
    while watchdog.opened:
        try:
            await watchdog.judge()
        except Exception as exc:  # the serve's watchdogs judge it at its deadline
            log.warning("sweep verdict failed", error=str(exc)[:300])
            return
        await audits.changed(1.0)
