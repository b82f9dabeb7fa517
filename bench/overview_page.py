"""The console's overview (``GET /ui``, with its two failure charts) at 10,000 audits, as a live
page reads it every few seconds: p50 and p99 over REQUESTS requests to an ``api`` served on
loopback (SQLite backends; the data of ``failure_charts.py``: 2,922 failures in the last 7 days
over every error code, the most bars a week's chart can have short of every code failing every
hour).

    .venv/bin/python bench/overview_page.py [audits] [requests]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
import uuid

import httpx

from bench.failure_charts import events
from projections.factory import open_store
from tests.consumers.api.conftest import LiveServer


async def fill(url: str, n: int) -> None:
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
    finally:
        await store.stop()


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    requests = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    with tempfile.TemporaryDirectory() as tmp:
        database = f"sqlite:///{tmp}/audits.db"
        asyncio.run(fill(database, n))
        settings = {
            "event_log_url": f"sqlite:///{tmp}/events.db",
            "database_url": database,
            "topic_prefix": f"b{uuid.uuid4().hex[:8]}",
            "cloudflare_api_url": "http://127.0.0.1:9",
            "cloudflare_account_id": "acc-bench",
            "posthog_api_key": None,
        }
        with LiveServer(["api"], **settings) as live, httpx.Client(base_url=live.url) as client:
            first = client.get("/ui")
            assert first.status_code == 200, first.text[:500]
            print(f"{n} audits: the overview is {len(first.content)} bytes")
            times = []
            for _ in range(requests):
                began = time.perf_counter()
                answer = client.get("/ui")
                times.append((time.perf_counter() - began) * 1000)
                assert answer.status_code == 200
            times.sort()
            p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
            print(f"GET /ui  p50 {statistics.median(times):6.2f} ms  p99 {p99:6.2f} ms")


if __name__ == "__main__":
    main()
