"""An event log and a projection store of a test's own, on a backend pair, for testing the
components (projector, probe, watchdog, supervision, operations) without ``auditrec serve``.

``open_pipeline(backend)`` opens and initialises both (Kafka with quick group membership, and
its topics deleted afterwards); :func:`run_until_idle` steps components until none has work
left; :func:`lifecycle_events` reads the lifecycle topic back as events.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from consumers.eventlog.codec import decode, encode
from consumers.eventlog.factory import open_event_log
from consumers.eventlog.port import EventLog, OutRecord, Record, Topics
from consumers.operations.backends import Backends
from consumers.runtime.component import Component
from consumers.runtime.settings import load_settings
from projections.factory import open_store
from projections.store import ProjectionStore
from statemachine.events import AuditEvent, ProbeRequested, ProbeRequestedData, Trigger
from tests.conftest import Backend
from tests.eventually import eventually

__all__ = [
    "FAST_GROUPS",
    "Pipeline",
    "append",
    "lifecycle_events",
    "open_pipeline",
    "probe_request",
    "read_topic",
    "run_until_idle",
]

# Quick group membership for tests (the broker runs group.initial.rebalance.delay.ms=0).
FAST_GROUPS = {"heartbeat_interval_ms": 200, "session_timeout_ms": 6000}
LIFECYCLE_PARTITIONS = 3


@dataclass
class Pipeline:
    backend: Backend
    log: EventLog
    store: ProjectionStore

    @property
    def topics(self) -> Topics:
        return self.log.topics

    def other_store(self) -> ProjectionStore:
        """Another, unstarted store on the same database (as another process would open)."""
        return open_store(self.backend.database_url)


@contextlib.asynccontextmanager
async def open_pipeline(backend: Backend) -> AsyncIterator[Pipeline]:
    topics = Topics(backend.topic_prefix)
    options: dict[str, object] = {}
    if backend.event_log_url.startswith("kafka://"):
        options = {"lifecycle_partitions": LIFECYCLE_PARTITIONS, "consumer_options": FAST_GROUPS}
    log = open_event_log(backend.event_log_url, topics, **options)
    store = open_store(backend.database_url)
    async with log, store:
        await log.init()
        await store.init()
        try:
            yield Pipeline(backend, log, store)
        finally:
            if backend.event_log_url.startswith("kafka://"):
                await _delete_topics(backend, topics)


async def _delete_topics(backend: Backend, topics: Topics) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=backend.event_log_url.removeprefix("kafka://"))
    await admin.start()
    with contextlib.suppress(Exception):
        await admin.delete_topics(list(topics.all()))
    await admin.close()


def backends_of(pipeline: Pipeline) -> Backends:
    """Backends (what operations such as ``rebuild`` take) over the pipeline's log and store."""
    b = pipeline.backend
    backends = Backends(load_settings(event_log_url=b.event_log_url, database_url=b.database_url,
                                topic_prefix=b.topic_prefix))  # fmt: skip
    backends.log, backends.store = pipeline.log, pipeline.store
    return backends


async def append(log: EventLog, topic: str, events: Iterable[AuditEvent | ProbeRequested]) -> None:
    await log.append([encode(topic, e) for e in events])


async def append_raw(log: EventLog, records: Sequence[OutRecord]) -> None:
    await log.append(list(records))


async def read_topic(log: EventLog, topic: str) -> list[Record]:
    out: list[Record] = []
    for partition in await log.inspection.partitions(topic):
        async for batch in log.inspection.read(topic, partition, 0):
            out.extend(batch)
    return out


async def lifecycle_events(log: EventLog, *, at_least: int = 0) -> list[AuditEvent]:
    """The lifecycle topic's events, once at least ``at_least`` are readable (transactional
    writes become readable when their commit markers are)."""
    records = await eventually(
        lambda: read_topic(log, log.topics.lifecycle),
        until=lambda rs: len(rs) >= at_least,
        timeout=30,
        message=f"{at_least} lifecycle events readable",
    )
    return [decode(r.value) for r in records]


async def run_until_idle(*components: Component, timeout: float = 30.0) -> None:
    """Step the components until a round handles nothing and every one is idle."""
    for c in components:
        c.poll_timeout = 0.05

    async def round_without_work() -> bool:
        handled = 0
        for c in components:
            handled += await c.step()
        return handled == 0 and all([await c.idle() for c in components])

    names = ", ".join(c.name for c in components)
    await eventually(round_without_work, timeout=timeout, interval=0, message=f"{names} to be idle")


def probe_request(
    audit_id: str,
    instance: str | None,
    at: datetime,
    trigger: Trigger = Trigger.WATCHDOG,
    correlation_id: uuid.UUID | None = None,
) -> ProbeRequested:
    return ProbeRequested(
        event_id=uuid.uuid4(),
        audit_id=audit_id,
        occurred_at=at,
        producer="test",
        correlation_id=correlation_id,
        data=ProbeRequestedData(workflow_instance_id=instance, trigger=trigger),
    )


class OverlappingWrites:
    """A store's ``apply``, slowed down, that records which partitions the writes under way
    cover whenever one starts, and the offsets each partition is stored at, in order."""

    def __init__(self, apply: Any, delay: float = 0.02) -> None:
        self.real_apply, self.delay = apply, delay
        self.writing: list[frozenset[tuple[str, int]]] = []
        self.overlaps: list[tuple[frozenset[tuple[str, int]], ...]] = []
        self.order: dict[tuple[str, int], list[int]] = {}

    async def __call__(self, events: Any, offsets: Any, *args: Any, **kwargs: Any) -> Any:
        mine = frozenset(offsets)
        self.writing.append(mine)
        self.overlaps.append(tuple(self.writing))
        for tp, offset in offsets.items():
            self.order.setdefault(tp, []).append(offset)
        try:
            await asyncio.sleep(self.delay)
            return await self.real_apply(events, offsets, *args, **kwargs)
        finally:
            self.writing.remove(mine)

    def most_at_once(self) -> int:
        return max(len(under_way) for under_way in self.overlaps)

    def assert_one_write_a_partition_in_order(self) -> None:
        """No two writes under way covered one partition; each partition's offsets grew."""
        assert self.overlaps
        for under_way in self.overlaps:
            written = [tp for keys in under_way for tp in keys]
            assert len(written) == len(set(written)), under_way
        assert all(offsets == sorted(offsets) for offsets in self.order.values()), self.order
