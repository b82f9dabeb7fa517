"""The overview's failure charts at 10,000 audits (a third of them failed, spread over the last
7 days across the error codes): p50 and p99 over REPEAT calls of the store's
``failures_by_hour`` for each window (24 h, 7 d), of ``failure_counts`` beside it for
comparison, and of drawing both charts; on SQLite or PostgreSQL, with the query's plan.

    .venv/bin/python bench/failure_charts.py [sqlite|postgres] [audits] [repeat]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.databases import fresh_database
from consumers.api.ui.charts import failure_chart
from projections.factory import open_store
from statemachine.events import AuditEvent, AuditFailed, AuditStarted
from statemachine.vocabulary import ERROR_CODES

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
NOW = datetime(2026, 12, 6, 12, 30, tzinfo=UTC)
WEEK = timedelta(days=7)


def events(n: int) -> list[AuditEvent]:
    out: list[AuditEvent] = []
    for i in range(n):
        audit = f"a-{i:06d}"
        start = NOW - WEEK - timedelta(days=1) + (WEEK + timedelta(days=1)) * i / n
        out.append(
            AuditStarted(
                event_id=uuid.uuid4(),
                audit_id=audit,
                occurred_at=start,
                producer="bench",
                data={"project_id": f"p-{i % 200}", "started_at": start},
            )
        )
        if i % 3 == 1:
            data = {
                "error_code": ERROR_CODES[i % len(ERROR_CODES)],
                "error_detail": "x",
                "failed_by": "workflow",
            }
            out.append(
                AuditFailed(
                    event_id=uuid.uuid4(),
                    audit_id=audit,
                    occurred_at=start + timedelta(minutes=20),
                    producer="bench",
                    data=data,
                )
            )
    return out


async def timed(name: str, repeat: int, call: Callable[[], Awaitable[Any]]) -> None:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        await call()
        times.append((time.perf_counter() - began) * 1000)
    times.sort()
    p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
    print(f"{name:34} p50 {statistics.median(times):6.2f} ms  p99 {p99:6.2f} ms")


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
        day, week = NOW - timedelta(hours=24), NOW - WEEK
        hourly = await store.audits.failures_by_hour(week)
        print(f"{n} audits, {sum(hourly.values())} failures in 7 d, {len(hourly)} (hour, code)")
        await timed("failures_by_hour 24 h", repeat, lambda: store.audits.failures_by_hour(day))
        await timed("failures_by_hour 7 d", repeat, lambda: store.audits.failures_by_hour(week))
        await timed(
            "failure_counts 7 d (beside it)", repeat, lambda: store.audits.failure_counts(week)
        )

        async def draw() -> None:
            failure_chart(hourly, day, NOW, "24 h", "24h")
            failure_chart(hourly, week, NOW, "7 d", "7d")

        await timed("both charts drawn", repeat, draw)
        if url.startswith("postgresql"):
            pool = store.audits.db.pool  # type: ignore[attr-defined]
            plan = await pool.fetch(
                "EXPLAIN SELECT date_trunc('hour', failed_at AT TIME ZONE 'UTC') "
                "AT TIME ZONE 'UTC', error_code, count(*) FROM audits WHERE status = 'failed' "
                "AND failed_at >= $1 GROUP BY 1, 2",
                week,
            )
            print("\n".join(r[0] for r in plan))
    finally:
        await store.stop()


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
