"""Benchmark: what a reconciler restart costs as history grows, with and without checkpoints.

For each history size (events in the lifecycle topic on Kafka, mostly finished audits plus a
thousand running ones), a first reconciler folds everything and saves checkpoints; then a new
dead-audit observation is appended and a fresh reconciler (a restart, a rebalance) is timed
from its start to that decision — once loading the checkpoints, once folding from offset 0.

Target: with checkpoints, the larger history's figure ≤ 1.5 × the smaller one's, and ≤ 10 s.

    python bench/restart.py [--sizes 100000,1000000] [--kafka 127.0.0.1:9092]
        [--database-url postgresql://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
import uuid
from datetime import UTC, datetime, timedelta

from databases import fresh_database  # bench/databases.py (bench/ is on sys.path)

from consumers.components.reconciler import Reconciler
from consumers.eventlog.codec import encode
from consumers.eventlog.factory import open_event_log
from consumers.eventlog.port import EventLog, Topics
from projections.factory import open_store
from statemachine.events import (
    AuditCompleted,
    AuditEvent,
    AuditProgressed,
    AuditProgressedData,
    AuditStarted,
    AuditStartedData,
    WorkflowStatusObserved,
    WorkflowStatusObservedData,
)
from statemachine.policy import Policy

RUNNING = 1000
T0 = datetime.now(UTC) - timedelta(hours=2)


def history(n: int) -> list[AuditEvent]:
    """``n`` events: audits of five events (started, three progress reports, completed), the
    last ``RUNNING`` audits left running."""
    out: list[AuditEvent] = []
    audits = n // 5
    for a in range(audits):
        audit_id = f"h-{a}"
        out.append(
            AuditStarted(
                event_id=uuid.uuid4(),
                audit_id=audit_id,
                occurred_at=T0,
                producer="bench",
                data=AuditStartedData(project_id="p", workflow_instance_id=f"wf-{a}"),
            )
        )
        for page in range(3):
            out.append(
                AuditProgressed(
                    event_id=uuid.uuid4(),
                    audit_id=audit_id,
                    occurred_at=T0,
                    producer="bench",
                    data=AuditProgressedData(pages_crawled=page),
                )
            )
        if a < audits - RUNNING:
            out.append(
                AuditCompleted(
                    event_id=uuid.uuid4(), audit_id=audit_id, occurred_at=T0, producer="bench"
                )
            )
    return out


def dead_observation(audit_id: str, instance: str) -> WorkflowStatusObserved:
    return WorkflowStatusObserved(
        event_id=uuid.uuid4(),
        audit_id=audit_id,
        occurred_at=datetime.now(UTC),
        producer="bench",
        data=WorkflowStatusObservedData(
            workflow_instance_id=instance,
            status="errored",
            error="Worker exceeded memory limit",
            trigger="watchdog",
            observed_at=datetime.now(UTC),
        ),
    )


async def until_decided(reconciler: Reconciler, log: EventLog, audit_id: str) -> float:
    t0 = time.perf_counter()
    await reconciler.start()
    while True:
        await reconciler.step()
        state = reconciler.state(audit_id)
        if state is not None and state.status == "failed":
            return time.perf_counter() - t0


async def measure(size: int, kafka: str, database_url: str) -> dict[str, float]:
    topics = Topics(f"restart{uuid.uuid4().hex[:8]}")
    log = open_event_log(f"kafka://{kafka}", topics, lifecycle_partitions=4)
    async with fresh_database(database_url) as url:
        store = open_store(url)
        async with log, store:
            await log.init()
            await store.init()
            events = history(size)
            for i in range(0, len(events), 20_000):
                await log.append([encode(topics.lifecycle, e) for e in events[i : i + 20_000]])
            first = Reconciler(log, Policy(), checkpoints=store)
            assert first.checkpoints is not None
            first.checkpoints.every_events = 10_000
            t0 = time.perf_counter()
            await first.start()
            while await first.lag() > 0 or first.consumer is None or not first.partitions:
                await first.step()
            first_fold = time.perf_counter() - t0
            await first.stop()
            figures = {"first_fold_s": first_fold}
            for n, (label, checkpoints) in enumerate(
                (("with_checkpoints_s", store), ("from_offset_0_s", None))
            ):
                audit_id = f"h-{size // 5 - 1 - n}"  # a running audit
                instance = f"wf-{size // 5 - 1 - n}"
                await log.append([encode(topics.lifecycle, dead_observation(audit_id, instance))])
                fresh = Reconciler(log, Policy(), checkpoints=checkpoints)
                figures[label] = await until_decided(fresh, log, audit_id)
                await fresh.stop()
            await _delete_topics(kafka, topics)
    return figures


async def _delete_topics(kafka: str, topics: Topics) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
    await admin.start()
    with contextlib.suppress(Exception):
        await admin.delete_topics(list(topics.all()))
    await admin.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--kafka", default="127.0.0.1:9092")
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results = {size: await measure(size, args.kafka, args.database_url) for size in sizes}
    print("reconciler restart: start → first decision (Kafka + PostgreSQL)")
    for size, f in results.items():
        print(
            f"  {size:>9,} events: with checkpoints {f['with_checkpoints_s']:.2f}s, "
            f"from offset 0 {f['from_offset_0_s']:.2f}s (first fold {f['first_fold_s']:.1f}s)"
        )
    small, large = results[sizes[0]], results[sizes[-1]]
    ratio = large["with_checkpoints_s"] / max(small["with_checkpoints_s"], 1e-9)
    print(
        f"  growth with checkpoints: {ratio:.2f}× (target ≤ 1.5×), "
        f"largest {large['with_checkpoints_s']:.2f}s (target ≤ 10 s)"
    )


if __name__ == "__main__":
    asyncio.run(main())
