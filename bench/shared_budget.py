"""Requests per budget window at the Workflows simulator with three probing processes.

Three processes, each with its own Workflows client on one account, probe as fast as they can
with a budget of 60 requests per 10 s window shared through the projection store (SQLite, or
PostgreSQL with ``--database-url``). The simulator counts what reaches it; the figure to
compare is the most requests seen in any 10 s window (target ≤ the budget), next to what three
processes with a budget each would have sent.

    .venv/bin/python bench/shared_budget.py [--database-url postgresql://…] [--seconds 25]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import tempfile
import time
from pathlib import Path

BUDGET, WINDOW, PROCESSES = 60, 10.0, 3


def prober(api_url: str, database_url: str, seconds: float, index: int) -> None:
    from consumers.workflows.client import WorkflowsClient
    from consumers.workflows.ratelimit import SharedRateLimit
    from projections.factory import open_store

    async def main() -> None:
        async with open_store(database_url) as store:
            await store.init()
            limiter = SharedRateLimit(
                store.budget, "bench-account", BUDGET, WINDOW, sleep=asyncio.sleep
            )
            async with WorkflowsClient(
                api_url=api_url, account_id="a", workflow="site-audit", api_token=None,
                limiter=limiter, max_retries=0,
            ) as client:  # fmt: skip
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    await client.get_instance(f"i-{index}", wait=1.0)

    asyncio.run(main())


def main() -> None:
    from consumers.workflows.simulator.server import SimulatorServer

    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url")
    parser.add_argument("--seconds", type=float, default=25.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, SimulatorServer() as sim:
        for i in range(PROCESSES):
            sim.sim.set_instance(f"i-{i}", "running")
        url = args.database_url or f"sqlite:///{Path(tmp) / 'audits.db'}"
        procs = [
            multiprocessing.Process(target=prober, args=(sim.url, url, args.seconds, i))
            for i in range(PROCESSES)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        total = sim.sim.stats()["total"]
        busiest = sim.sim.busiest_window(WINDOW)
        print(
            f"{PROCESSES} processes, budget {BUDGET} per {WINDOW:g} s shared through {url.split(':')[0]}"
        )
        print(f"  requests at the simulator: {total} in {args.seconds:g} s")
        print(
            f"  most in any {WINDOW:g} s window: {busiest}  (target ≤ {BUDGET}; "
            f"a budget per process would allow {PROCESSES * BUDGET})"
        )


if __name__ == "__main__":
    main()
