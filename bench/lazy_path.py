"""Benchmark: reads of one audit's status, on the embedded default and on Kafka + PostgreSQL.

- on-demand reconciliation of a dead audit (``GET /audits/{id}`` of a running audit whose
  workflow errored, answered failed in the same response): latency over the Workflows API's own
  (the simulator answers after ``--latency-ms``), p50 and p99 (target ≤ 250 ms p99 extra);
- reads of terminal audits (and of running ones with ``?probe=false``): p50 and p99 (targets
  ≤ 2 ms on SQLite, ≤ 10 ms on PostgreSQL).

Each backend pair runs ``serve`` (api, projector, reconciler, probe) in this process and reads
over real HTTP, one read at a time.

    python bench/lazy_path.py [--dead 50] [--reads 1000] [--latency-ms 50]
        [--kafka 127.0.0.1:9092] [--database-url postgresql://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from databases import fresh_database  # bench/databases.py (bench/ is on sys.path)

from consumers.cli.assembly import Service
from consumers.operations.backends import Backends
from consumers.operations.service import Operations
from consumers.runtime.settings import load_settings
from consumers.workflows.simulator.server import SimulatorServer
from statemachine.events import AuditCompleted, AuditEvent, AuditStarted, AuditStartedData

DEBUG = False


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def started(audit_id: str, instance: str, at: datetime) -> AuditStarted:
    return AuditStarted(
        event_id=uuid.uuid4(),
        audit_id=audit_id,
        occurred_at=at,
        producer="bench",
        data=AuditStartedData(project_id="p", workflow_instance_id=instance),
    )


async def measure(
    name: str, overrides: dict[str, Any], dead: int, reads: int, latency_ms: float
) -> dict[str, Any]:
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    async with SimulatorServer() as server:
        server.sim.latency_ms = latency_ms
        port = _free_port()
        settings = load_settings(
            topic_prefix=prefix,
            cloudflare_api_url=server.url,
            posthog_api_key=None,
            api_port=port,
            on_demand_wait="10s",
            **overrides,
        )
        old = datetime.now(UTC) - timedelta(hours=1)
        events: list[AuditEvent] = []
        for i in range(dead):
            server.sim.set_instance(
                f"wf-dead-{i}",
                "errored",
                error={"name": "Error", "message": "exceeded memory limit"},
            )
            events.append(started(f"dead-{i}", f"wf-dead-{i}", old))
        for i in range(100):
            events.append(started(f"done-{i}", f"wf-done-{i}", old))
            events.append(
                AuditCompleted(
                    event_id=uuid.uuid4(), audit_id=f"done-{i}", occurred_at=old, producer="bench"
                )
            )
        async with Backends(settings) as backends:
            await Operations(backends).publish(events)
            components = ["projector", "reconciler", "probe", "api"]
            async with Service(backends, components) as service:
                runner = asyncio.create_task(service.run())
                async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                    while True:  # the pipeline is live and the table has every audit
                        try:
                            r = await http.get(
                                f"/audits/dead-{dead - 1}", params={"probe": "false"}
                            )
                        except httpx.ConnectError:  # the API is still starting
                            await asyncio.sleep(0.1)
                            continue
                        live = await Operations(backends).pipeline_live()
                        if r.status_code == 200 and live:
                            break
                        await asyncio.sleep(0.1)
                    for i in range(100):
                        await http.get(f"/audits/done-{i}")
                    extra: list[float] = []
                    failed = 0
                    for i in range(dead):
                        await asyncio.sleep(0.05)
                        t0 = time.perf_counter()
                        r = await http.get(f"/audits/dead-{i}")
                        extra.append((time.perf_counter() - t0) * 1000 - latency_ms)
                        failed += r.json()["status"] == "failed"
                        if i == 0 and DEBUG:
                            print(name, r.json())
                    terminal = await asyncio.to_thread(_terminal_reads, port, reads)
                service.stopping.set()
                await runner
    return {
        "backend": name,
        "dead_failed_in_response": f"{failed}/{dead}",
        "on_demand_extra_p50_ms": round(statistics.median(extra), 1),
        "on_demand_extra_p99_ms": round(percentile(extra, 0.99), 1),
        "terminal_p50_ms": round(statistics.median(terminal), 2),
        "terminal_p99_ms": round(percentile(terminal, 0.99), 2),
    }


_READER = """
import http.client, json, sys, time
port, reads = int(sys.argv[1]), int(sys.argv[2])
conn = http.client.HTTPConnection("127.0.0.1", port)
out = []
for n in range(reads):
    t0 = time.perf_counter()
    conn.request("GET", f"/audits/done-{n % 100}")
    response = conn.getresponse()
    body = response.read()
    out.append((time.perf_counter() - t0) * 1000)
    assert response.status == 200, body
print(json.dumps(out))
"""


def _terminal_reads(port: int, reads: int) -> list[float]:
    """Reads from a process of its own (as another service would read), one at a time on
    one keep-alive connection, timed there."""
    done = subprocess.run(
        [sys.executable, "-c", _READER, str(port), str(reads)],
        capture_output=True,
        text=True,
        check=True,
    )
    values: list[float] = json.loads(done.stdout)
    return values


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dead", type=int, default=50)
    parser.add_argument("--reads", type=int, default=1000)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--kafka", default="127.0.0.1:9092")
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--only", choices=["sqlite", "kafka"], default=None)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        pairs = {
            "sqlite": {
                "event_log_url": f"sqlite:///{Path(tmp)}/e.db",
                "database_url": f"sqlite:///{Path(tmp)}/a.db",
            },
            "kafka+postgres": {
                "event_log_url": f"kafka://{args.kafka}",
                "database_url": args.database_url,
            },
        }
        for name, overrides in pairs.items():
            if args.only is not None and not name.startswith(args.only):
                continue
            if name == "sqlite":
                results.append(
                    await measure(name, overrides, args.dead, args.reads, args.latency_ms)
                )
                continue
            async with fresh_database(args.database_url) as url:
                overrides["database_url"] = url
                results.append(
                    await measure(name, overrides, args.dead, args.reads, args.latency_ms)
                )
    targets = {"sqlite": (None, 2.0), "kafka+postgres": (250.0, 10.0)}
    print(f"reads of one audit (simulator latency {args.latency_ms:g} ms)")
    for r in results:
        on_demand_target, terminal_target = targets[r["backend"]]
        print(
            f"  {r['backend']:<15} dead audit failed in the response {r['dead_failed_in_response']}"
            f"; on-demand extra over the API: p50 {r['on_demand_extra_p50_ms']} ms, "
            f"p99 {r['on_demand_extra_p99_ms']} ms"
            + (f" (target ≤ {on_demand_target:g} ms p99)" if on_demand_target else "")
        )
        print(
            f"  {'':<15} terminal audit: p50 {r['terminal_p50_ms']} ms, "
            f"p99 {r['terminal_p99_ms']} ms (target ≤ {terminal_target:g} ms)"
        )


if __name__ == "__main__":
    asyncio.run(main())
