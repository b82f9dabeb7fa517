"""Status reads against the shared probe budget: how much of it 1,000 reads with a read token
spend, and whether the watchdog's probes still go out after them.

A real ``auditrec serve`` process (embedded backends) probes the Workflows simulator with the
default budget (1,000 requests per 5 minutes) and the status reads' share
(``AUDITREC_ON_DEMAND_BUDGET_SHARE``, default 0.5) within the watchdog's floor
(``AUDITREC_WATCHDOG_BUDGET_FLOOR``, default 0.3). 1,000 running audits are published; a
client with a ``read`` token reads each once (``GET /audits/{id}``, ``--concurrency`` at a
time), then an operator sweeps (one watchdog tick over 100 audits not yet observed, each asked
alone). Printed: the reads probed and answered from the table, the requests spent by spender
(from the store), what the simulator saw, and the sweep's probes and refusals. ``--share 1``
shows that the floor still holds when reads may take the whole window; ``--share 1 --floor 0``
shows what one reader could do before the share and the floor existed.

    .venv/bin/python bench/on_demand_budget.py [--reads 1000] [--share 0.5] [--floor 0.3]
        [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from consumers.workflows.simulator.server import SimulatorServer

READER = "bench-reader-token-0123456789"
OPERATOR = "bench-operator-token-0123456789"
AUDITREC = str(Path(sys.executable).with_name("auditrec"))


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def started(audit_id: str, at: datetime) -> dict[str, Any]:
    return {
        "type": "AuditStarted",
        "audit_id": audit_id,
        "producer": "bench",
        "occurred_at": at.isoformat(),
        "data": {"project_id": "p", "workflow_instance_id": f"wf-{audit_id}"},
    }


async def wait_until(check: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


def serve_env(
    args: argparse.Namespace, sim: SimulatorServer, tmp: Path, port: int
) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("AUDITREC_")} | {
        "AUDITREC_EVENT_LOG_URL": f"sqlite:///{tmp}/events.db",
        "AUDITREC_DATABASE_URL": f"sqlite:///{tmp}/audits.db",
        "AUDITREC_API_PORT": str(port),
        "AUDITREC_API_TOKENS": f"reader:{READER}:read,ops:{OPERATOR}:operate",
        "AUDITREC_CLOUDFLARE_API_URL": sim.url,
        "AUDITREC_CLOUDFLARE_ACCOUNT_ID": "bench",
        "AUDITREC_ON_DEMAND_BUDGET_SHARE": str(args.share),
        "AUDITREC_WATCHDOG_BUDGET_FLOOR": str(args.floor),
        "AUDITREC_ON_DEMAND_WAIT": "10s",
        "AUDITREC_WATCHDOG_INTERVAL": "1h",  # the sweep below is the only tick after start
        "AUDITREC_WATCHDOG_BULK_LIMIT": "0",
        "AUDITREC_LOG_LEVEL": "warning",
    }


async def measure(
    args: argparse.Namespace, sim: SimulatorServer, tmp: Path, port: int, audits: list[str]
) -> dict[str, Any]:
    at = datetime.now(UTC) - timedelta(minutes=30)
    base = f"http://127.0.0.1:{port}"
    async with (
        httpx.AsyncClient(base_url=base, timeout=60, headers=_bearer(OPERATOR)) as ops,
        httpx.AsyncClient(base_url=base, timeout=60, headers=_bearer(READER)) as reader,
    ):

        async def up() -> bool:
            with contextlib.suppress(httpx.TransportError):
                return (await ops.get("/readyz")).status_code == 200
            return False

        await wait_until(up, "serve to come up")
        await asyncio.sleep(1.0)  # the start-up tick, over nothing yet
        before = sim.sim.stats()["total"]
        for i in range(0, len(audits), 200):
            r = await ops.post("/events", json=[started(a, at) for a in audits[i : i + 200]])
            assert r.status_code == 202, r.text

        async def projected() -> bool:
            r = await ops.get(f"/audits/{audits[-1]}", params={"probe": "false"})
            return r.status_code == 200

        await wait_until(projected, "the audits in the table")
        gate = asyncio.Semaphore(args.concurrency)

        async def read(audit_id: str) -> dict[str, Any]:
            async with gate:
                r = await reader.get(f"/audits/{audit_id}")
                assert r.status_code == 200, r.text
                body: dict[str, Any] = r.json()
                return body

        t0 = time.perf_counter()
        bodies = await asyncio.gather(*(read(a) for a in audits[: args.reads]))
        elapsed = time.perf_counter() - t0
        after_reads = sim.sim.stats()["total"] - before
        spent_reads = _spent(tmp)
        sweep = (await ops.post("/sweep", headers={"content-type": "application/json"})).json()
        after_sweep = sim.sim.stats()["total"] - before
        spent = _spent(tmp)
    probed = sum(1 for b in bodies if b["probed"])
    notes = {b["note"] for b in bodies if not b["probed"]}
    return {
        "reads": len(bodies),
        "reads_probed": probed,
        "reads_from_the_table": len(bodies) - probed,
        "reads_seconds": round(elapsed, 1),
        "simulator_requests_after_reads": after_reads,
        "spent_after_reads": spent_reads,
        "sweep": {k: sweep.get(k) for k in ("candidates", "probed", "healthy", "probe_errors")},
        "simulator_requests_after_sweep": after_sweep,
        "spent_after_sweep": spent,
        "notes": sorted(n for n in notes if n),
    }


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _spent(tmp: Path) -> dict[str, int]:
    """Requests in the budget's window by spender, read from the store's file."""
    with contextlib.closing(sqlite3.connect(f"file:{tmp}/audits.db?mode=ro", uri=True)) as conn:
        rows = conn.execute("SELECT spender, count(*) FROM api_requests GROUP BY spender")
        return dict(rows.fetchall())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reads", type=int, default=1000)
    parser.add_argument("--share", type=float, default=0.5)
    parser.add_argument("--floor", type=float, default=0.3)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, SimulatorServer() as sim:
        audits = [f"bench-{i}" for i in range(args.reads + 100)]
        for audit_id in audits:
            sim.sim.set_instance(f"wf-{audit_id}", "running")
        port = free_port()
        env = serve_env(args, sim, Path(tmp), port)
        serve = subprocess.Popen([AUDITREC, "serve"], env=env, stdout=subprocess.DEVNULL)
        try:
            result = asyncio.run(measure(args, sim, Path(tmp), port, audits))
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.wait(30)
    print(
        f"budget 1000 per 5 min, status reads' share {args.share:g}, "
        f"watchdog's floor {args.floor:g}"
    )
    for key, value in result.items():
        print(f"  {key}: {value}")


if __name__ == "__main__":
    main()
