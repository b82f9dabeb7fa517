"""The audits list at 10,000 audits: one page (50 rows) and its total, for the search by audit
id, instance id, project id and a URL's beginning, the held filter, and each sort, on SQLite
and on PostgreSQL; p50 and p99 of ``list_page`` over REPEAT calls, and PostgreSQL's plan of
the search. Then the console's page of a search (``/ui/audits?q=…``) rendered by a real
``auditrec serve --only api`` over HTTP, REPEAT requests one after another.

    .venv/bin/python bench/listing.py [sqlite|postgres] [audits] [repeat]
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from bench.databases import fresh_database
from consumers.operations.listing import AuditFilter, list_page
from projections.factory import open_store
from statemachine.events import AuditCompleted, AuditEvent, AuditFailed, AuditStarted

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
T0 = datetime(2026, 11, 1, tzinfo=UTC)


def events(n: int) -> list[AuditEvent]:
    out: list[AuditEvent] = []
    for i in range(n):
        audit = f"a-{i:06d}"
        start = T0 + timedelta(seconds=i * 7)
        out.append(
            AuditStarted(
                event_id=uuid.uuid4(),
                audit_id=audit,
                occurred_at=start,
                producer="bench",
                data={
                    "project_id": f"p-{i % 200}",
                    "workflow_instance_id": f"wf-{i:06d}",
                    "start_url": f"https://site{i % 500}.example/page/{i}",
                    "started_at": start,
                },
            )
        )
        end = start + timedelta(minutes=5 + i % 90)
        if i % 3 == 0:
            out.append(
                AuditCompleted(
                    event_id=uuid.uuid4(),
                    audit_id=audit,
                    occurred_at=end,
                    producer="bench",
                    data={},
                )
            )
        elif i % 3 == 1:
            out.append(
                AuditFailed(
                    event_id=uuid.uuid4(),
                    audit_id=audit,
                    occurred_at=end,
                    producer="bench",
                    data={"error_code": "oom", "error_detail": "x", "failed_by": "workflow"},
                )
            )
    return out


CASES: list[tuple[str, AuditFilter, str, str]] = [
    ("newest first", AuditFilter(), "started", "desc"),
    ("q = an audit id", AuditFilter(q="a-004321"), "started", "desc"),
    ("q = an instance id", AuditFilter(q="wf-004321"), "started", "desc"),
    ("q = a project id (50 audits)", AuditFilter(q="p-17"), "started", "desc"),
    ("q = a URL's beginning (20)", AuditFilter(q="site42.example/"), "started", "desc"),
    ("held", AuditFilter(held=True), "started", "desc"),
    ("sort ended desc", AuditFilter(), "ended", "desc"),
    ("sort age asc", AuditFilter(), "age", "asc"),
    ("sort status asc", AuditFilter(), "status", "asc"),
]


async def run(url: str, n: int, repeat: int) -> None:
    store = open_store(url)
    await store.start()
    await store.init()
    try:
        batch = events(n)
        for i in range(0, len(batch), 2000):
            chunk = batch[i : i + 2000]
            await store.writer.apply(
                [(e, ("t", 0, i + k)) for k, e in enumerate(chunk)],
                {("t", 0): i + len(chunk)},
                "bench",
            )
        now = T0 + timedelta(days=30)
        for name, where, sort, order in CASES:
            times = []
            for _ in range(repeat):
                began = time.perf_counter()
                page = await list_page(
                    store.audits, where, 50, None, now, sort=sort, order=order, total=True
                )
                times.append((time.perf_counter() - began) * 1000)
            times.sort()
            p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
            print(
                f"{name:32} rows {len(page.rows):3} total {page.total:6}  "
                f"p50 {statistics.median(times):6.2f} ms  p99 {p99:6.2f} ms"
            )
        if url.startswith("postgresql"):
            pool = store.audits.db.pool  # type: ignore[attr-defined]
            plan = await pool.fetch(
                "EXPLAIN SELECT audit_id FROM audits WHERE (audit_id = $1 OR "
                'workflow_instance_id = $1 OR project_id = $1 OR (start_url COLLATE "C" >= $2 '
                'AND start_url COLLATE "C" < $3)) ORDER BY started_at DESC, audit_id DESC '
                "LIMIT 51",
                "site42.example/",
                "site42.example/",
                "site42.example0",
            )
            print("\n".join(r[0] for r in plan))
    finally:
        await store.stop()
    await rendered(url, repeat)


async def rendered(url: str, repeat: int) -> None:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AUDITREC_")} | {
            "AUDITREC_DATABASE_URL": url,
            "AUDITREC_EVENT_LOG_URL": f"sqlite:///{tmp}/events.db",
            "AUDITREC_API_PORT": str(port),
            "AUDITREC_METRICS_PORT": "0",
            "AUDITREC_LOG_LEVEL": "WARNING",
        }
        server = await asyncio.create_subprocess_exec(
            str(Path(sys.executable).with_name("auditrec")),
            "serve",
            "--only",
            "api",
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                for _ in range(600):
                    try:
                        if (await client.get("/readyz")).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    await asyncio.sleep(0.1)
                await client.get("/ui")  # the console's session cookie (no token: open)
                for name, query in (
                    ("page: search an audit id", "q=a-004321"),
                    ("page: search a URL's beginning", "q=site42.example/"),
                    ("page: newest first", ""),
                ):
                    times = []
                    for _ in range(repeat):
                        began = time.perf_counter()
                        answer = await client.get(f"/ui/audits?{query}")
                        times.append((time.perf_counter() - began) * 1000)
                        assert answer.status_code == 200, answer.text[:300]
                    times.sort()
                    p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
                    print(f"{name:32} p50 {statistics.median(times):6.2f} ms  p99 {p99:6.2f} ms")
        finally:
            server.send_signal(signal.SIGTERM)
            await asyncio.wait_for(server.wait(), 30)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def main() -> None:
    kind = sys.argv[1] if len(sys.argv) > 1 else "sqlite"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
    repeat = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
    if kind == "postgres":
        async with fresh_database(ADMIN) as url:
            await run(url, n, repeat)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            await run(f"sqlite:///{tmp}/audits.db", n, repeat)


if __name__ == "__main__":
    asyncio.run(main())
