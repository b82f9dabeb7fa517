"""How long the console takes to render one audit's page whose history holds 500 events, in the
API's own process (ASGI, no network), next to a table of 10,000 audits.

    python bench/console.py [--history 500] [--audits 10000] [--requests 1000]
                            [--database sqlite|postgres]

The audit's history is a realistic stretch: its start, healthy watchdog observations five
minutes apart with a failed probe now and then, then a large sweep that finds the instance gone
(the decision held by the mass-failure brake) and the sweeps since, again held. The page is
read ``--requests`` times after a warm-up; prints p50, p90 and p99 of the time to the whole
answer, and the page's size. ``--database postgres`` creates a database of its own on the
server of AUDITREC_TEST_DATABASE_URL (default ``postgresql://postgres@127.0.0.1:5432/postgres``)
and drops it at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx

from consumers.api.app import build_app
from consumers.operations.backends import Backends
from consumers.operations.service import Operations
from consumers.runtime.settings import load_settings
from statemachine.events import (
    AuditEvent,
    AuditFailureHeld,
    AuditStarted,
    WorkflowProbeFailed,
    WorkflowStatusObserved,
)
from statemachine.policy import Policy
from statemachine.rules import decide
from statemachine.state import fold

AUDIT = "a-bench"
INSTANCE = "wf-bench"
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
_offsets = itertools.count()


def _env(audit_id: str, when: datetime) -> dict[str, Any]:
    return {"event_id": uuid.uuid4(), "audit_id": audit_id, "occurred_at": when, "producer": "b"}


def _observed(when: datetime, status: str, **extra: Any) -> WorkflowStatusObserved:
    data = {
        "workflow_instance_id": INSTANCE,
        "status": status,
        "trigger": "watchdog",
        "observed_at": when,
        **extra,
    }
    return WorkflowStatusObserved(**_env(AUDIT, when), data=data)


def history(size: int, now: datetime) -> list[AuditEvent]:
    """``size`` events of one audit, ending about now (see the module's docstring)."""
    held_tail = max(size // 20, 2)
    healthy = size - held_tail - 3
    start = now - timedelta(minutes=5 * (size + 12))
    events: list[AuditEvent] = [
        AuditStarted(
            **_env(AUDIT, start), data={"project_id": "p-1", "workflow_instance_id": INSTANCE}
        )
    ]
    when = start
    for i in range(healthy):
        when += timedelta(minutes=5)
        if i % 97 == 96:
            data = {
                "workflow_instance_id": INSTANCE,
                "reason": "timeout",
                "detail": "no answer in 10 s",
                "trigger": "watchdog",
                "observed_at": when,
            }
            events.append(WorkflowProbeFailed(**_env(AUDIT, when), data=data))
        else:
            events.append(_observed(when, "running"))
    sweep = {"sweep_id": "sweep-large", "sweep_size": 50}
    when += timedelta(hours=1)
    gone = _observed(when, "not_found", **sweep)
    _, hold = decide(fold(events), gone, Policy())
    assert isinstance(hold, AuditFailureHeld)
    events += [gone, hold]
    for _ in range(size - len(events)):
        when += timedelta(minutes=5)
        events.append(_observed(when, "not_found", **sweep))
    return events


async def fill(backends: Backends, size: int, audits: int) -> None:
    now = datetime.now(UTC)
    writer = backends.store.writer
    mine = history(size, now)
    await writer.apply([(e, ("bench", 0, next(_offsets))) for e in mine], {}, "bench")
    for first in range(0, audits, 2000):
        batch = [
            AuditStarted(
                **_env(f"a-{n:06d}", now - timedelta(minutes=n)),
                data={"project_id": f"p-{n % 40}", "workflow_instance_id": f"wf-{n:06d}"},
            )
            for n in range(first, min(first + 2000, audits))
        ]
        await writer.apply([(e, ("bench", 1, next(_offsets))) for e in batch], {}, "bench")


async def _read_pages(backends: Backends, args: argparse.Namespace) -> tuple[list[float], int]:
    """The seconds each of ``--requests`` reads of the audit's page took, and its size."""
    await fill(backends, args.history, args.audits)
    app = build_app(Operations(backends))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        url = f"/ui/audits/{AUDIT}"
        first = await client.get(url)
        assert first.status_code == 200, first.text[:500]
        assert 'data-kind="quiet"' in first.text and 'data-kind="held"' in first.text
        for _ in range(20):  # warm-up
            await client.get(url)
        times = []
        for _ in range(args.requests):
            began = time.perf_counter()
            answer = await client.get(url)
            times.append(time.perf_counter() - began)
            assert answer.status_code == 200
    return times, len(first.content)


async def measure(args: argparse.Namespace) -> None:
    admin = os.environ.get("AUDITREC_TEST_DATABASE_URL", PG_ADMIN)
    name = f"bench_console_{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        database = f"sqlite:///{tmp}/audits.db"
        if args.database == "postgres":
            conn = await asyncpg.connect(admin)
            await conn.execute(f'CREATE DATABASE "{name}"')
            await conn.close()
            database = urlunsplit(urlsplit(admin)._replace(path=f"/{name}"))
        settings = load_settings(
            event_log_url=f"sqlite:///{tmp}/events.db",
            database_url=database,
            topic_prefix=f"bench{uuid.uuid4().hex[:6]}",
            posthog_api_key=None,
        )
        try:
            async with Backends(settings) as backends:
                await backends.store.init()
                times, size = await _read_pages(backends, args)
        finally:
            if args.database == "postgres":
                conn = await asyncpg.connect(admin)
                await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                await conn.close()
    cuts = statistics.quantiles(times, n=100)
    print(
        f"audit page, {args.history} history entries, {args.audits} audits ({args.database}): "
        f"{args.requests} requests, p50 {cuts[49] * 1000:.1f} ms, p90 {cuts[89] * 1000:.1f} ms, "
        f"p99 {cuts[98] * 1000:.1f} ms, {size / 1024:.0f} KiB a page"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", type=int, default=500)
    parser.add_argument("--audits", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    asyncio.run(measure(parser.parse_args()))


if __name__ == "__main__":
    main()
