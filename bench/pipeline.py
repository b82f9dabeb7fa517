"""Benchmark: lifecycle events per second through the projector and the reconciler on
Kafka + PostgreSQL, next to the raw rate at which aiokafka alone consumes the same topic and
the raw rate at which PostgreSQL ``COPY`` accepts the same rows — all in one run, each phase in
its own process (so each one's peak memory is its own).

    python bench/pipeline.py [--events 200000] [--partitions 12]

Floors, which a change must not break: projector ≥ 12 % of the raw consume rate, reconciler
≥ 16 %, ``rebuild`` ≥ 13 % (printed "below floor" when missed; judge by the median of three
runs). The machine's speed drifts within a run, so raw consume is measured just before and just
after each of the three, and each ratio is to the mean of those two. Raw consume is three
passes by new consumers, each timed from its first batch in hand, whose records (fetched
before the clock starts) are not counted; a consumer is timed from its first batch in hand,
whose records (handled after it starts) are; rebuild is timed whole.
Besides each process's CPU per event (start-up included), the CPU per event while measured.
``bench/reconciler_group.py`` compares one reconciler process with two in one consumer group.
Needs ``make services-up`` (Kafka on 127.0.0.1:9092, PostgreSQL on 127.0.0.1:5432).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

KAFKA = os.environ.get("AUDITREC_TEST_KAFKA", "127.0.0.1:9092")
PG = os.environ.get("AUDITREC_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def _events(n: int) -> list[Any]:
    from statemachine.events import EVENT_ADAPTER

    t0 = datetime(2026, 11, 30, 6, tzinfo=UTC)
    out = []
    audits = n // 5
    for i in range(audits):
        a = f"audit-{i:08d}"
        wf = f"wf-{uuid.UUID(int=i)}"
        base = {"audit_id": a, "producer": "crawler"}

        def ev(kind: str, minutes: int, data: dict[str, Any], **extra: Any) -> Any:
            return EVENT_ADAPTER.validate_python(
                {
                    **base,
                    **extra,
                    "event_id": str(uuid.uuid4()),
                    "type": kind,
                    "occurred_at": t0 + timedelta(minutes=minutes),
                    "data": data,
                }
            )

        out.append(
            ev(
                "AuditStarted",
                0,
                {
                    "project_id": f"p-{i % 977}",
                    "organization_id": f"o-{i % 101}",
                    "started_by_user_id": f"u-{i % 4099}",
                    "start_url": f"https://site-{i}.example.com/",
                    "workflow_instance_id": wf,
                    "pages_total": 400,
                },
            )
        )
        out.append(ev("AuditProgressed", 1, {"current_phase": "crawl", "pages_crawled": 10}))
        obs = t0 + timedelta(minutes=30)
        status = "errored" if i % 4 == 0 else "running"
        out.append(
            ev(
                "WorkflowStatusObserved",
                30,
                {
                    "workflow_instance_id": wf,
                    "status": status,
                    "trigger": "watchdog",
                    "error": {"name": "Error", "message": "Worker exceeded memory limit"}
                    if status == "errored"
                    else None,
                    "observed_at": obs.isoformat(),
                },
            )
        )
        out.append(ev("AuditProgressed", 31, {"current_phase": "analyze", "pages_crawled": 200}))
        out.append(ev("AuditCompleted", 40, {"pages_crawled": 400}))
    return out


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def runtime_log(prefix: str, partitions: int) -> Any:
    from consumers.eventlog.kafka.log import KafkaEventLog
    from consumers.eventlog.port import Topics

    return KafkaEventLog(f"kafka://{KAFKA}", Topics(prefix), lifecycle_partitions=partitions)


async def phase_produce(prefix: str, n: int, partitions: int) -> dict[str, Any]:
    from consumers.eventlog.codec import encode

    log = runtime_log(prefix, partitions)
    async with log:
        await log.init()
        events = _events(n)
        t = time.perf_counter()
        for i in range(0, len(events), 20_000):
            await log.append([encode(log.topics.lifecycle, e) for e in events[i : i + 20_000]])
        return {"events": len(events), "rate": len(events) / (time.perf_counter() - t)}


async def phase_raw_consume(prefix: str, n: int, partitions: int) -> dict[str, Any]:
    """Three passes over the topic, each by a new consumer (a pass takes under a second: three
    make the figure as long-lived as the others'), each timed from its first batch in hand,
    whose records are not counted (fetching them, all a raw consumer does, came before)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    topic = f"{prefix}.lifecycle.v1"
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    count, elapsed, passes = 0, 0.0, []
    for _ in range(3):
        consumer = AIOKafkaConsumer(
            bootstrap_servers=KAFKA,
            enable_auto_commit=False,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=8 * 1024 * 1024,
            fetch_max_bytes=64 * 1024 * 1024,
        )
        await consumer.start()
        try:
            consumer.assign(tps)
            ends = await consumer.end_offsets(tps)
            t: float | None = None
            counted = 0
            while any(await _behind(consumer, tps, ends)):
                batch = await consumer.getmany(timeout_ms=1000, max_records=10_000)
                got = sum(len(records) for records in batch.values())
                if t is None:
                    t = time.perf_counter() if got else None
                else:
                    counted += got
            assert t is not None
            took = time.perf_counter() - t
        finally:
            await consumer.stop()
        count, elapsed = count + counted, elapsed + took
        passes.append(round(counted / took))
    return {"events": count, "rate": count / elapsed, "passes": passes}


async def _behind(consumer: Any, tps: list[Any], ends: dict[Any, int]) -> list[bool]:
    return [await consumer.position(tp) < ends[tp] for tp in tps]


async def phase_raw_copy(prefix: str, n: int, partitions: int) -> dict[str, Any]:
    import asyncpg

    from consumers.eventlog.codec import encode

    events = _events(n)
    now = datetime.now(UTC)
    rows = [
        (
            e.event_id,
            e.audit_id,
            e.type,
            e.occurred_at,
            e.causation_id,
            "t",
            0,
            i,
            encode("t", e).value.decode(),
            now,
        )
        for i, e in enumerate(events)
    ]
    conn = await asyncpg.connect(PG)
    try:
        await conn.execute(
            "CREATE UNLOGGED TABLE IF NOT EXISTS bench_copy (event_id uuid, audit_id text, type text,"
            ' occurred_at timestamptz, causation_id uuid, topic text, partition int, "offset" bigint,'
            " body json, recorded_at timestamptz)"  # as audit_events (migration 4)
        )
        await conn.execute("TRUNCATE bench_copy")
        t = time.perf_counter()
        for i in range(0, len(rows), 5000):
            await conn.copy_records_to_table("bench_copy", records=rows[i : i + 5000])
        elapsed = time.perf_counter() - t
        await conn.execute("DROP TABLE bench_copy")
    finally:
        await conn.close()
    return {"events": len(rows), "rate": len(rows) / elapsed}


async def _drain(component: Any, total: int, counter: Any) -> float:
    """Events per second from the moment the component has its first batch in hand (joining
    the consumer group is not processing) until ``counter()`` reaches ``total``. Every event
    counted is handled inside the window, the first batch's included, and so is every write
    the window holds (the projector's writes of its first batch too)."""
    handle = component._handle
    began: list[float] = []

    async def timed(records: list[Any]) -> int:
        if not began:
            began.append(time.perf_counter())
            MEASURED["cpu"] = time.process_time()
        return int(await handle(records))

    component._handle = timed
    quiet = 0
    while counter() < total:
        handled = await component.step()
        quiet = 0 if handled else quiet + 1
        if quiet > 40:
            raise RuntimeError(f"stalled at {counter()} of {total}")
    assert began, "no batch was handled"
    MEASURED["cpu"] = time.process_time() - MEASURED["cpu"]
    MEASURED["events"] = counter()
    return counter() / (time.perf_counter() - began[0])


MEASURED: dict[str, float] = {}  # the CPU seconds and events of the measured window


async def phase_projector(prefix: str, n: int, partitions: int) -> dict[str, Any]:
    from consumers.components.projector import Projector
    from projections.postgres.store import PostgresStore

    log = runtime_log(prefix, partitions)
    store = PostgresStore(PG, schema=prefix)
    async with log, store:
        await store.init()
        projector = Projector(log, store.writer)
        async with projector:
            rate = await _drain(projector, n, lambda: projector.applied)
        return {"events": projector.applied, "rate": rate}


async def phase_rebuild(prefix: str, n: int, partitions: int) -> dict[str, Any]:
    from consumers.operations.backends import Backends
    from consumers.operations.rebuild import rebuild_projection
    from consumers.runtime.settings import load_settings
    from projections.postgres.store import PostgresStore

    settings = load_settings(event_log_url=f"kafka://{KAFKA}", database_url=PG, topic_prefix=prefix)
    backends = Backends(settings)
    backends.log = runtime_log(prefix, partitions)
    backends.store = PostgresStore(PG, schema=prefix)
    async with backends:
        t = time.perf_counter()
        cpu = time.process_time()
        applied = await rebuild_projection(backends)
        elapsed = time.perf_counter() - t
        MEASURED["cpu"], MEASURED["events"] = time.process_time() - cpu, applied
    return {"events": applied, "rate": applied / elapsed}


async def phase_reconciler(prefix: str, n: int, partitions: int) -> dict[str, Any]:
    from consumers.components.reconciler import Reconciler
    from statemachine.policy import Policy

    log = runtime_log(prefix, partitions)
    async with log:
        reconciler = Reconciler(log, Policy())

        async with reconciler:
            original = reconciler._handle

            async def counting(records: list[Any]) -> int:
                nonlocal handled
                handled += len(records)
                return await original(records)

            handled = 0
            reconciler._handle = counting  # type: ignore[method-assign]
            # The input events: what it read, less its own decisions read back. Those not read
            # back yet count against it too, so the count errs low until the last is read.
            rate = await _drain(reconciler, n, lambda: handled - reconciler.decided)
            seen = handled - reconciler.decided
        return {"events": seen, "rate": rate, "decisions": reconciler.decided}


PHASES = {
    "produce": phase_produce,
    "raw-consume": phase_raw_consume,
    "raw-copy": phase_raw_copy,
    "projector": phase_projector,
    "reconciler": phase_reconciler,
    "rebuild": phase_rebuild,
}


def run_phase(name: str, prefix: str, n: int, partitions: int) -> dict[str, Any]:
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--phase",
            name,
            "--prefix",
            prefix,
            "--events",
            str(n),
            "--partitions",
            str(partitions),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if out.returncode != 0:
        raise SystemExit(f"phase {name} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


async def drop_schema(prefix: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(PG)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{prefix}" CASCADE')
    finally:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--phase")
    parser.add_argument("--prefix")
    args = parser.parse_args()
    if args.phase:
        from consumers.runtime.logs import configure_logging

        configure_logging("WARNING", "json")  # decisions are logged at INFO: not measured
        from consumers.runtime.collector import tune_gc

        tune_gc()  # as `auditrec serve` does
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        result = asyncio.run(PHASES[args.phase](args.prefix, args.events, args.partitions))
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
        result["cpu_us_per_event"] = round(cpu / max(result["events"], 1) * 1e6, 1)
        if MEASURED.get("events"):
            result["measured_cpu_us_per_event"] = round(
                MEASURED["cpu"] / MEASURED["events"] * 1e6, 1
            )
        result["peak_mb"] = round(peak_mb(), 1)
        print(json.dumps(result))
        return
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    n = args.events - args.events % 5
    print(
        f"pipeline benchmark: {n} lifecycle events, {args.partitions} partitions, prefix {prefix}"
    )
    # The machine's speed drifts over a run (shared cores): raw consume is measured just
    # before and just after each consumer's phase, and each ratio is to the mean of the two.
    results: dict[str, dict[str, Any]] = {}
    raws: list[float] = []
    paired: dict[str, float] = {}
    try:
        for name in _PLAN:
            r = run_phase(name, prefix, n, args.partitions)
            results[name] = r
            if name == "raw-consume":
                raws.append(r["rate"])
                if len(raws) > 1:
                    paired[_BRACKETED[len(raws) - 2]] = (raws[-2] + raws[-1]) / 2
            _report(name, r)
    finally:
        asyncio.run(drop_schema(prefix))
    print("ratios to the raw aiokafka consume rate measured just before and after each:")
    for name, floor in FLOORS.items():
        ratio = results[name]["rate"] / paired[name]
        verdict = "ok" if ratio >= floor else "below floor"
        print(
            f"  {name:<12} {ratio:6.1%}  (floor ≥ {floor:.0%}) {verdict}"
            f"   raw consume {paired[name]:,.0f} events/s"
        )
    raw = sum(raws) / len(raws)
    print(f"  raw COPY     {results['raw-copy']['rate'] / raw:6.1%} of raw consume (mean of all)")
    print(f"  raw consume ranged {min(raws):,.0f} to {max(raws):,.0f} events/s in this run")


# Each consumer's rate as a share of raw consume, which a change must not go below.
FLOORS = {"projector": 0.12, "reconciler": 0.16, "rebuild": 0.13}
_BRACKETED = tuple(FLOORS)
_PLAN = ("produce", "raw-copy", "raw-consume", *(p for b in _BRACKETED for p in (b, "raw-consume")))


def _report(name: str, r: dict[str, Any]) -> None:
    print(
        f"  {name:<12} {r['rate']:>10,.0f} events/s   peak {r['peak_mb']:>6.1f} MB"
        f"   {r['cpu_us_per_event']:>6.1f} µs CPU/event (this process)"
        + (
            f", {r['measured_cpu_us_per_event']:>5.1f} while measured"
            if "measured_cpu_us_per_event" in r
            else ""
        )
        + (f"   ({r['decisions']} decisions)" if "decisions" in r else "")
        + (f"   (passes: {', '.join(f'{p:,}' for p in r['passes'])})" if "passes" in r else ""),
        flush=True,
    )


if __name__ == "__main__":
    main()
