"""Benchmark: the latency the ingest topic adds for a Kafka publisher.

A publisher's own producer (aiokafka, acks=all) writes events at a steady rate, keyed by audit
id; a read-committed consumer of the lifecycle topic (what the projector and the reconciler
are) notes when each becomes readable. Two phases on fresh topics, alternated per round:

- direct: the publisher writes the lifecycle topic itself (what the ingest topic replaces);
- ingest: the publisher writes the ingest topic and the ingest component (as `serve` runs it:
  transactional, committing its offsets with the appends) validates each onto the lifecycle.

Latency is from the producer's send to the record being readable on the lifecycle topic; the
added latency is the ingest phase's percentile minus the direct phase's.

    python bench/ingest.py [--events 2000] [--rate 200] [--rounds 2] [--kafka 127.0.0.1:9092]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import time
import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from consumers.components.ingest import Ingest
from consumers.eventlog.factory import open_event_log
from consumers.eventlog.port import EventLog, Topics
from consumers.runtime.logs import configure_logging

PARTITIONS = 6


def event(audit_id: str, event_id: str) -> bytes:
    return json.dumps(
        {
            "event_id": event_id,
            "type": "AuditProgressed",
            "audit_id": audit_id,
            "producer": "bench",
            "data": {"pages_crawled": 1},
        }
    ).encode()


async def watch(kafka: str, topic: str, seen: dict[str, float], ready: asyncio.Event) -> None:
    """Note when each event id becomes readable (read-committed) on ``topic``."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    try:
        parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(parts)
        await consumer.seek_to_end(*parts)
        for tp in parts:
            await consumer.position(tp)
        ready.set()
        while True:
            batches = await consumer.getmany(timeout_ms=50)
            now = time.perf_counter()
            for records in batches.values():
                for r in records:
                    seen.setdefault(json.loads(r.value)["event_id"], now)
    finally:
        await consumer.stop()


async def publish(kafka: str, topic: str, n: int, rate: float) -> dict[str, float]:
    """Write ``n`` events to ``topic`` at ``rate`` per second; when each was sent."""
    producer = AIOKafkaProducer(bootstrap_servers=kafka, acks="all", linger_ms=0)
    await producer.start()
    sent: dict[str, float] = {}
    try:
        start = time.perf_counter()
        for i in range(n):
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            event_id = str(uuid.uuid4())
            audit_id = f"bench-{i % 50}"
            sent[event_id] = time.perf_counter()
            await producer.send(topic, event(audit_id, event_id), key=audit_id.encode())
        await producer.flush()
    finally:
        await producer.stop()
    return sent


async def phase(kafka: str, log: EventLog, via: str, n: int, rate: float) -> list[float]:
    topics = log.topics
    seen: dict[str, float] = {}
    ready = asyncio.Event()
    watcher = asyncio.create_task(watch(kafka, topics.lifecycle, seen, ready))
    await ready.wait()
    ingest: Ingest | None = None
    runner: asyncio.Task[None] | None = None
    if via == "ingest":
        ingest = Ingest(log)
        ingest.poll_timeout = 0.05
        await ingest.start()

        async def run() -> None:
            assert ingest is not None
            while True:
                await ingest.step()

        runner = asyncio.create_task(run())
        # the component joins its group before the clock starts
        await asyncio.sleep(0)
        while not ingest.consumer or len(ingest.consumer.assignment()) < PARTITIONS:
            await asyncio.sleep(0.05)
    target = topics.ingest if via == "ingest" else topics.lifecycle
    sent = await publish(kafka, target, n, rate)
    deadline = time.perf_counter() + 60
    while len(seen.keys() & sent.keys()) < n and time.perf_counter() < deadline:
        await asyncio.sleep(0.05)
    for task in (watcher, runner):
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if ingest is not None:
        await ingest.stop()
    missing = n - len(seen.keys() & sent.keys())
    if missing:
        raise SystemExit(f"{via}: {missing} of {n} events never became readable")
    return [(seen[e] - t) * 1000 for e, t in sent.items()]


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=200.0, help="events per second")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--kafka", default="127.0.0.1:9092")
    args = parser.parse_args()
    configure_logging("WARNING", "console")
    results: dict[str, list[float]] = {"direct": [], "ingest": []}
    for round_ in range(args.rounds):
        for via in ("direct", "ingest"):
            topics = Topics(f"bi{uuid.uuid4().hex[:10]}")
            log = open_event_log(f"kafka://{args.kafka}", topics, lifecycle_partitions=PARTITIONS)
            async with log:
                await log.init()
                try:
                    ms = await phase(args.kafka, log, via, args.events, args.rate)
                finally:
                    admin = AIOKafkaAdminClient(bootstrap_servers=args.kafka)
                    await admin.start()
                    with contextlib.suppress(Exception):
                        await admin.delete_topics(list(topics.all()))
                    await admin.close()
            results[via].extend(ms)
            print(
                f"round {round_ + 1} {via:6}: p50 {percentile(ms, 50):7.1f} ms  "
                f"p99 {percentile(ms, 99):7.1f} ms  mean {statistics.fmean(ms):7.1f} ms",
                flush=True,
            )
    d, i = results["direct"], results["ingest"]
    print(
        f"all rounds ({len(i)} events each way, {args.rate:g}/s): "
        f"direct p50 {percentile(d, 50):.1f} ms p99 {percentile(d, 99):.1f} ms; "
        f"ingest p50 {percentile(i, 50):.1f} ms p99 {percentile(i, 99):.1f} ms; "
        f"added p50 {percentile(i, 50) - percentile(d, 50):.1f} ms "
        f"p99 {percentile(i, 99) - percentile(d, 99):.1f} ms"
    )


if __name__ == "__main__":
    asyncio.run(main())
