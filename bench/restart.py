"""Benchmark: what a reconciler or telemetry restart costs as history grows, with and without
checkpoints.

For each history size (events in the lifecycle topic on Kafka, mostly finished audits plus a
thousand running ones), a first reconciler folds everything and saves checkpoints; then a new
dead-audit observation is appended and a fresh reconciler (a restart, a rebalance) is timed
from its start to that decision — once loading the checkpoints, once folding from offset 0;
then a fresh telemetry (which checkpointed the history before) is timed to its report of the
failures those decisions are.

Target: with checkpoints, the larger history's figure ≤ 1.5 × the smaller one's, and ≤ 10 s.

    python bench/restart.py [--sizes 100000,1000000] [--kafka 127.0.0.1:9092]
        [--database-url postgresql://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from databases import fresh_database  # bench/databases.py (bench/ is on sys.path)

from consumers.components.reconciler import Reconciler
from consumers.components.telemetry import Telemetry
from consumers.eventlog.codec import encode
from consumers.eventlog.factory import open_event_log
from consumers.eventlog.port import EventLog, Topics
from consumers.runtime.logs import configure_logging
from consumers.runtime.settings import load_settings
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


class Capture:
    """A local PostHog: answers every batch 200 and counts the events."""

    def __init__(self) -> None:
        self.events = 0
        capture = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                capture.events += len(json.loads(body).get("batch", []))
                self.send_response(200)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"


async def caught_up(component: Reconciler | Telemetry) -> None:
    await component.start()
    while await component.lag() > 0 or component.consumer is None or not component.partitions:
        await component.step()


async def until_sent(telemetry: Telemetry) -> float:
    t0 = time.perf_counter()
    await telemetry.start()
    while telemetry.sent == 0:
        await telemetry.step()
    return time.perf_counter() - t0


async def measure(size: int, kafka: str, database_url: str, capture: Capture) -> dict[str, float]:
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
            first = Reconciler(log, Policy(), checkpoints=store.checkpoints)
            assert first.checkpoints is not None
            first.checkpoints.every_events = 10_000
            t0 = time.perf_counter()
            await caught_up(first)
            first_fold = time.perf_counter() - t0
            await first.stop()
            settings = load_settings(
                posthog_api_key="phc_bench", posthog_host=capture.url, topic_prefix=topics.prefix
            )
            watcher = Telemetry(log, store, settings)
            watcher.checkpoints.every_events = 10_000
            await caught_up(watcher)  # nothing to report yet: it folds and checkpoints
            await watcher.stop()
            figures = {"first_fold_s": first_fold}
            for n, (label, checkpoints) in enumerate(
                (("with_checkpoints_s", store.checkpoints), ("from_offset_0_s", None))
            ):
                audit_id = f"h-{size // 5 - 1 - n}"  # a running audit
                instance = f"wf-{size // 5 - 1 - n}"
                await log.append([encode(topics.lifecycle, dead_observation(audit_id, instance))])
                fresh = Reconciler(log, Policy(), checkpoints=checkpoints)
                figures[label] = await until_decided(fresh, log, audit_id)
                await fresh.stop()
            # the decisions are failures found by reconciliation: a restarted telemetry's first
            # report, loading its checkpoints
            restarted = Telemetry(log, store, settings)
            figures["telemetry_s"] = await until_sent(restarted)
            await restarted.stop()
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
    configure_logging("WARNING", "console")
    sizes = [int(s) for s in args.sizes.split(",")]
    capture = Capture()
    results = {size: await measure(size, args.kafka, args.database_url, capture) for size in sizes}
    print("restart: start → first decision (Kafka + PostgreSQL)")
    for size, f in results.items():
        print(
            f"  {size:>9,} events: reconciler with checkpoints {f['with_checkpoints_s']:.2f}s, "
            f"from offset 0 {f['from_offset_0_s']:.2f}s (first fold {f['first_fold_s']:.1f}s); "
            f"telemetry with checkpoints {f['telemetry_s']:.2f}s (to its first report)"
        )
    small, large = results[sizes[0]], results[sizes[-1]]
    for name, key in (("reconciler", "with_checkpoints_s"), ("telemetry", "telemetry_s")):
        ratio = large[key] / max(small[key], 1e-9)
        print(
            f"  {name} growth with checkpoints: {ratio:.2f}× (target ≤ 1.5×), "
            f"largest {large[key]:.2f}s (target ≤ 10 s)"
        )


if __name__ == "__main__":
    asyncio.run(main())
