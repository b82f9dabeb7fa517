"""Benchmark: what stall detection and orphan scans cost in Workflows API requests, on the
embedded backends against the simulator.

Stall detection, per 1,000 running audits, through ``auditrec sweep``'s own path.

Three runs over the same 1,000 running audits, whose instances all run, with bulk discovery
(the instance listing) on as in production:

- ``off``: ``AUDITREC_STALLED_AFTER=0``: what a tick costs today (listing pages);
- ``progressing``: stall detection on, every audit progressing (silent for less than the
  threshold): what stall detection adds while nothing stalls;
- ``all silent``: stall detection on (``report``), every audit silent past the threshold: the
  ticks until every one is reported, the requests they take, and a tick after that.

Orphan scans over 10,000 alive instances (9,500 held by audits, 500 orphans): the listing
pages one scan reads on its own, and those it reads when the watchdog's listing of the same
step reaches back to the watch (none).

    python bench/stalls.py [--audits 1000] [--instances 10000] [--latency-ms 5]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from consumers.cli.assembly import Service
from consumers.components.orphans import OrphanScan
from consumers.components.projector import Projector
from consumers.operations.backends import Backends
from consumers.operations.service import Operations
from consumers.runtime.logs import configure_logging
from consumers.runtime.names import PIPELINE
from consumers.runtime.settings import load_settings
from consumers.workflows.answers import ProbeFailure
from consumers.workflows.discovery import MARGIN, Discovery
from consumers.workflows.simulator.server import SimulatorServer
from consumers.workflows.simulator.state import LISTING
from statemachine.events import AuditStarted, AuditStartedData

QUIET = 2.0  # seconds: AUDITREC_STALLED_AFTER in the runs with stall detection


def requests(server: SimulatorServer) -> tuple[int, int]:
    """(all requests, instance reads) so far: the rest are listing pages."""
    stats = server.sim.stats()
    reads = sum(n for key, n in stats["by_instance"].items() if key != LISTING)
    return stats["total"], reads


async def run(audits: int, latency_ms: float, mode: str) -> dict[str, Any]:
    now = datetime.now(UTC)
    started = now - timedelta(hours=2)
    with tempfile.TemporaryDirectory() as tmp:
        async with SimulatorServer() as server:
            server.sim.latency_ms = latency_ms
            for i in range(audits):
                server.sim.set_instance(f"wf-{i}", "running", queued=started, start=started)
            settings = load_settings(
                event_log_url=f"sqlite:///{Path(tmp)}/e.db",
                database_url=f"sqlite:///{Path(tmp)}/a.db",
                cloudflare_api_url=server.url,
                # a budget that never refuses: the ticks here follow each other at once, where
                # production spaces them by AUDITREC_WATCHDOG_INTERVAL (100 checks a tick)
                probe_budget=100_000,
                watchdog_batch_limit=100,
                watchdog_bulk_limit=10_000,
                stale_running_after=timedelta(0),
                stalled_after=timedelta(0)
                if mode == "off"
                else timedelta(hours=1 if mode == "progressing" else 0, seconds=QUIET),
                sweep_wait=timedelta(seconds=120),
                brake_min_audits=0,
                posthog_api_key=None,
            )
            async with Backends(settings) as backends:
                ops = Operations(backends)
                await ops.publish(
                    [
                        AuditStarted(
                            event_id=uuid.uuid4(),
                            audit_id=f"a-{i}",
                            occurred_at=started,
                            producer="bench",
                            data=AuditStartedData(project_id="p", workflow_instance_id=f"wf-{i}"),
                        )
                        for i in range(audits)
                    ]
                )
                async with Service(backends, PIPELINE) as service:
                    runner = asyncio.create_task(service.run())
                    while (await backends.store.audits.count_by_status()).get(
                        "running", 0
                    ) < audits:
                        await asyncio.sleep(0.05)
                    await asyncio.sleep(QUIET + 0.5)  # the progress ages past the threshold
                    ticks: list[tuple[int, int, float]] = []
                    for _ in range(audits // 100 + 2):
                        before, reads_before = requests(server)
                        t0 = time.perf_counter()
                        await ops.sweep()
                        total, reads = requests(server)
                        ticks.append(
                            (total - before, reads - reads_before, time.perf_counter() - t0)
                        )
                        stalled = len(
                            [
                                row
                                async for row in backends.store.audits.iter_rows()
                                if row.state.stalled_at is not None
                            ]
                        )
                        if mode != "all silent" or stalled == audits:
                            break
                    if mode == "all silent":  # and one more, once all are reported
                        before, reads_before = requests(server)
                        await ops.sweep()
                        total, reads = requests(server)
                        ticks.append((total - before, reads - reads_before, 0.0))
                    service.stopping.set()
                    await runner
    return {"ticks": ticks, "stalled": stalled}


async def orphans(instances: int, latency_ms: float) -> dict[str, Any]:
    now = datetime.now(UTC)
    created = now - timedelta(hours=2)
    held = instances - instances // 20
    with tempfile.TemporaryDirectory() as tmp:
        async with SimulatorServer() as server:
            server.sim.latency_ms = latency_ms
            for i in range(instances):
                server.sim.set_instance(f"wf-{i}", "running", queued=created, start=created)
            settings = load_settings(
                event_log_url=f"sqlite:///{Path(tmp)}/e.db",
                database_url=f"sqlite:///{Path(tmp)}/a.db",
                cloudflare_api_url=server.url,
                probe_budget=100_000,
                posthog_api_key=None,
            )
            async with Backends(settings) as backends:
                ops = Operations(backends)
                await backends.store.orphans.watch(["site-audit"], now - timedelta(hours=3))
                await ops.publish(
                    [
                        AuditStarted(
                            event_id=uuid.uuid4(),
                            audit_id=f"a-{i}",
                            occurred_at=created,
                            producer="bench",
                            data=AuditStartedData(project_id="p", workflow_instance_id=f"wf-{i}"),
                        )
                        for i in range(held)
                    ]
                )
                async with Service(backends, [Projector.name]) as service:
                    runner = asyncio.create_task(service.run())
                    while (await backends.store.audits.count_by_status()).get("running", 0) < held:
                        await asyncio.sleep(0.05)
                    service.stopping.set()
                    await runner
                client = await backends.client()
                out: dict[str, Any] = {}
                for shared in (False, True):
                    scan = OrphanScan(
                        backends.store,
                        client,
                        workflows=["site-audit"],
                        grace=timedelta(minutes=10),
                        interval=timedelta(hours=1),
                        owner=f"bench-{shared}",
                        clock=lambda shared=shared: now + timedelta(hours=2 if shared else 0),
                    )
                    listings = listed_from = None
                    if shared:  # the watchdog's listing of the step, reaching back to the watch
                        since = now - timedelta(hours=3)
                        listing = await Discovery(client, limit=instances).alive_since(
                            since + MARGIN, 120.0
                        )
                        assert not isinstance(listing, ProbeFailure), listing
                        listings = {"site-audit": listing}
                        listed_from = {"site-audit": since}
                    before, _ = requests(server)
                    t0 = time.perf_counter()
                    records = await scan.scan(scan.clock(), listings, listed_from)
                    after, _ = requests(server)
                    assert records is not None
                    out["shared" if shared else "alone"] = (
                        after - before,
                        records["site-audit"].open,
                        time.perf_counter() - t0,
                    )
    return out


def _orphan_lines(instances: int, r: dict[str, Any]) -> None:
    print(f"orphan scan over {instances} alive instances ({instances // 20} orphans)")
    for name, (pages, found, elapsed) in r.items():
        print(f"  {name:<7} {pages} listing pages, {found} orphans found, {elapsed:.1f} s")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--audits", type=int, default=1000)
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument("--latency-ms", type=float, default=5)
    args = parser.parse_args()
    configure_logging("WARNING", "console")
    n = args.audits
    print(f"{n} running audits, listing on, 100 audits a tick read alone at most")
    for mode in ("off", "progressing", "all silent"):
        r = await run(n, args.latency_ms, mode)
        ticks = r["ticks"]
        first_total, first_reads, _ = ticks[0]
        print(
            f"  {mode:<12} first tick: {first_total} requests ({first_reads} instance reads,"
            f" {first_total - first_reads} listing pages)"
        )
        if mode == "all silent":
            reporting = ticks[:-1]
            reads = sum(t[1] for t in reporting)
            pages = sum(t[0] - t[1] for t in reporting)
            last_total, last_reads, _ = ticks[-1]
            print(
                f"    {len(reporting)} ticks to report all {r['stalled']}: {reads} instance reads"
                f" ({reads * 1000 / n:.0f} per 1,000 audits) + {pages} listing pages"
            )
            print(f"    the tick after: {last_total} requests ({last_reads} instance reads)")
    _orphan_lines(args.instances, await orphans(args.instances, args.latency_ms))


if __name__ == "__main__":
    asyncio.run(main())
