"""Benchmark: one watchdog tick over 10,000 stale audits (9,500 alive, 500 dead of mixed kinds)
against the Workflows simulator, with bulk discovery (the workflow's instance listing) next to
today's one-get-per-audit approach, in one run, through ``auditrec sweep``'s own path on the
embedded backends.

Prints, for each: API requests used, budget windows they take at the default budget (1,000 per
5 minutes), and whether every dead audit failed in that one tick with the right code.
Target: ≤ 1,000 requests (one budget window), every dead audit failed with its code.

    python bench/discovery.py [--alive 9500] [--latency-ms 10]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import tempfile
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from consumers.cli.assembly import Service
from consumers.operations.backends import Backends
from consumers.operations.service import Operations
from consumers.runtime.logs import configure_logging
from consumers.runtime.names import PIPELINE
from consumers.runtime.settings import load_settings
from consumers.workflows.simulator.server import SimulatorServer
from statemachine.events import AuditStarted, AuditStartedData

BUDGET, WINDOW = 1000, 300.0
# The dead: (count, what the API says, its error message, the code expected).
DEAD = [
    (100, "errored", "Worker exceeded memory limit", "oom"),
    (60, "errored", "Worker exceeded CPU time limit.", "cpu_limit"),
    (40, "errored", "WorkflowTimeoutError: Execution timed out after 900000ms", "step_timeout"),
    (100, "terminated", None, "workflow_terminated"),
    (100, "complete", None, "finalize_lost"),
    (100, None, None, "instance_lost"),  # absent: expired from retention, or never existed
]


def seed(sim: Any, alive: int, now: datetime) -> dict[str, str]:
    """The instances; the audit id → the code each dead audit must fail with."""
    created = now - timedelta(hours=2)
    for i in range(alive):
        sim.set_instance(f"wf-alive-{i}", "running", queued=created, start=created)
    expected = {}
    n = 0
    for count, status, message, code in DEAD:
        for _ in range(count):
            expected[f"dead-{n}"] = code
            if status is not None:
                error = {"name": "Error", "message": message} if message else None
                sim.set_instance(
                    f"wf-dead-{n}",
                    status,
                    queued=created,
                    start=created,
                    end=now - timedelta(hours=1),
                    error=error,
                )
            n += 1
    return expected


async def one_tick(alive: int, latency_ms: float, bulk: bool) -> dict[str, Any]:
    now = datetime.now(UTC)
    with tempfile.TemporaryDirectory() as tmp:
        async with SimulatorServer() as server:
            server.sim.latency_ms = latency_ms
            expected = seed(server.sim, alive, now)
            total = alive + len(expected)
            settings = load_settings(
                event_log_url=f"sqlite:///{Path(tmp)}/e.db",
                database_url=f"sqlite:///{Path(tmp)}/a.db",
                cloudflare_api_url=server.url,
                # Today's approach asks about each audit alone: give it the budget to do so.
                probe_budget=BUDGET if bulk else 2 * total,
                probe_budget_window=WINDOW,
                watchdog_batch_limit=100 if bulk else total,
                watchdog_bulk_limit=total if bulk else 0,
                sweep_wait=timedelta(seconds=120),
                posthog_api_key=None,
            )
            async with Backends(settings) as backends:
                ops = Operations(backends)
                started = now - timedelta(hours=2)
                ids = [f"alive-{i}" for i in range(alive)] + list(expected)
                await ops.publish(
                    [
                        AuditStarted(
                            event_id=uuid.uuid4(),
                            audit_id=audit,
                            occurred_at=started,
                            producer="bench",
                            data=AuditStartedData(
                                project_id="p", workflow_instance_id=f"wf-{audit}"
                            ),
                        )
                        for audit in ids
                    ]
                )
                async with Service(backends, PIPELINE) as service:
                    runner = asyncio.create_task(service.run())
                    while (await backends.store.audits.count_by_status()).get("running", 0) < total:
                        await asyncio.sleep(0.05)
                    before = server.sim.stats()["total"]
                    t0 = time.perf_counter()
                    await ops.sweep()
                    # held instance_lost decisions are released at the sweep's verdict
                    deadline = time.monotonic() + 60
                    while (await backends.store.audits.count_by_status()).get("failed", 0) < len(
                        expected
                    ) and time.monotonic() < deadline:
                        await asyncio.sleep(0.1)
                    elapsed = time.perf_counter() - t0
                    requests = server.sim.stats()["total"] - before
                    rows = {
                        r.audit_id: r
                        for r in await backends.store.audits.list_audits(limit=total + 1)
                    }
                    service.stopping.set()
                    await runner
    wrong = {
        a: (rows[a].status, rows[a].state.error_code)
        for a, code in expected.items()
        if (rows[a].status, rows[a].state.error_code) != ("failed", code)
    }
    still = sum(1 for a in ids if a.startswith("alive-") and rows[a].status == "running")
    return {
        "requests": requests,
        "elapsed": elapsed,
        "wrong": wrong,
        "alive_running": still,
        "failed_by_code": Counter(rows[a].state.error_code for a in expected),
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--alive", type=int, default=9500)
    parser.add_argument("--latency-ms", type=float, default=10)
    args = parser.parse_args()
    configure_logging("WARNING", "console")  # each decision is logged at INFO
    dead = sum(d[0] for d in DEAD)
    print(
        f"one tick over {args.alive + dead} stale audits ({args.alive} alive, {dead} dead), "
        f"simulator at {args.latency_ms:g} ms per request"
    )
    ok = True
    for bulk in (True, False):
        r = await one_tick(args.alive, args.latency_ms, bulk)
        windows = math.ceil(r["requests"] / BUDGET)
        name = "bulk discovery" if bulk else "one get per audit"
        print(
            f"  {name:<18} {r['requests']:>6} API requests = {windows} budget window(s)"
            f" of {BUDGET}/{WINDOW:.0f}s   {r['elapsed']:6.1f} s   dead failed with the right"
            f" code: {dead - len(r['wrong'])}/{dead}"
            f"   alive still running: {r['alive_running']}/{args.alive}"
        )
        if r["wrong"]:
            print(f"    wrong: {dict(list(r['wrong'].items())[:5])}")
        if bulk:
            ok = r["requests"] <= BUDGET and not r["wrong"] and r["alive_running"] == args.alive
    total = args.alive + dead
    print(
        f"  at today's default of 100 audits a tick, one get each: {math.ceil(total / 100)} ticks"
        f" ({math.ceil(total / 100) * 5} minutes at the 5-minute interval) to look at them all"
    )
    print(
        f"  target: ≤ {BUDGET} requests and every dead audit failed in the one tick: "
        f"{'ok' if ok else 'NOT MET'}"
    )


if __name__ == "__main__":
    asyncio.run(main())
