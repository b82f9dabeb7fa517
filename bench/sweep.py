"""Benchmark (a): one sweep of N stale audits against the simulator with per-request latency.

Prints the wall time next to the bound ``max(N × latency / concurrency, N / allowed rate)`` and
the ratio (target ≤ 1.2). The request budget (1000 per 300 s sliding window) admits a burst of
up to 1000 requests, so for N ≤ budget the rate term is N / ∞ = 0; past the budget it is
(N − budget) / (budget / window). A sequential sweep (concurrency 1) is measured in the same
run for comparison.

    python bench/sweep.py [--audits 100] [--latency-ms 200] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from consumers.cli.assembly import Service
from consumers.operations.backends import Backends
from consumers.operations.service import Operations
from consumers.runtime.names import PIPELINE
from consumers.runtime.settings import load_settings
from consumers.workflows.simulator.server import SimulatorServer
from statemachine.events import AuditStarted, AuditStartedData


async def one_sweep(
    n: int, latency_ms: float, concurrency: int, budget: int, window: float
) -> tuple[float, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        async with SimulatorServer() as server:
            server.sim.latency_ms = latency_ms
            for i in range(n):
                server.sim.set_instance(f"wf-{i}", "running")
            settings = load_settings(
                event_log_url=f"sqlite:///{Path(tmp)}/e.db",
                database_url=f"sqlite:///{Path(tmp)}/a.db",
                cloudflare_api_url=server.url,
                probe_concurrency=concurrency,
                probe_budget=budget,
                probe_budget_window=window,
                watchdog_batch_limit=max(n, 1),
                posthog_api_key=None,
            )
            async with Backends(settings) as backends:
                ops = Operations(backends)
                started = datetime.now(UTC) - timedelta(hours=1)
                await ops.publish(
                    [
                        AuditStarted(
                            event_id=uuid.uuid4(),
                            audit_id=f"a-{i}",
                            occurred_at=started,
                            producer="bench",
                            data=AuditStartedData(project_id="p", workflow_instance_id=f"wf-{i}"),
                        )
                        for i in range(n)
                    ]
                )
                async with Service(backends, PIPELINE) as service:
                    runner = asyncio.create_task(service.run())
                    while len(await backends.store.audits.list_audits(limit=n + 1)) < n:
                        await asyncio.sleep(0.05)
                    t0 = time.perf_counter()
                    summary = await ops.sweep()
                    elapsed = time.perf_counter() - t0
                    service.stopping.set()
                    await runner
                return elapsed, summary.as_dict()


def bound(n: int, latency: float, concurrency: int, budget: int, window: float) -> float:
    io = n * latency / concurrency
    rate = 0.0 if n <= budget else (n - budget) / (budget / window)
    return max(io, rate)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--audits", type=int, default=100)
    parser.add_argument("--latency-ms", type=float, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--budget", type=int, default=1000)
    parser.add_argument("--window", type=float, default=300)
    parser.add_argument("--skip-sequential", action="store_true")
    args = parser.parse_args()
    n, lat = args.audits, args.latency_ms / 1000
    elapsed, summary = await one_sweep(
        n, args.latency_ms, args.concurrency, args.budget, args.window
    )
    b = bound(n, lat, args.concurrency, args.budget, args.window)
    print(
        f"sweep of {n} stale audits, {args.latency_ms:g} ms per request, concurrency {args.concurrency}"
    )
    print(
        f"  probed {summary['probed']}, healthy {summary['healthy']}, pending {summary['pending']}"
    )
    print(f"  wall time      {elapsed:6.2f} s")
    print(f"  bound          {b:6.2f} s  = max({n}×{lat:g}/{args.concurrency}, rate term)")
    print(f"  ratio          {elapsed / b:6.2f}  (target ≤ 1.20)")
    if not args.skip_sequential:
        seq, _ = await one_sweep(n, args.latency_ms, 1, args.budget, args.window)
        print(
            f"  sequential     {seq:6.2f} s  (concurrency 1, same run) → speed-up {seq / elapsed:.1f}×"
        )


if __name__ == "__main__":
    asyncio.run(main())
