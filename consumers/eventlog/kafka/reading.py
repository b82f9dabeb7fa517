"""Reading one partition of the Kafka log outside any consumer group (``KafkaInspection.read``).

Each read starts a consumer of its own and closes it at the end. (A reader kept between reads
and reassigned to the next partition costs more than it saves: the fetch in flight for the
previous partition holds the new one back for up to the fetch wait, about half a second per
partition of an assignment's fold.)"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition as KafkaTP

from consumers.eventlog.kafka.errors import translate
from consumers.eventlog.kafka.fetching import records
from consumers.eventlog.port import Record
from statemachine.errors import EventLogError

__all__ = ["read_partition"]


async def read_partition(
    reader: AIOKafkaConsumer,
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    stall_after: float,
    close: Callable[..., Awaitable[Any]],
) -> AsyncIterator[list[Record]]:
    """Batches of ``topic``/``partition`` from ``start`` up to ``end`` (exclusive, which the
    caller has checked exists), read with ``reader`` (a consumer outside any group, not yet
    started), which is closed with ``close`` at the end."""
    tp = KafkaTP(topic, partition)
    where = f"read {topic}/{partition}"
    try:
        with translate(where):
            await reader.start()
            reader.assign([tp])
            reader.seek(tp, start)
        progress, last = time.monotonic(), -1
        while True:
            with translate(where):
                position = await reader.position(tp)
                if position >= end:  # judged by position: markers occupy offsets too
                    return
                batches = await reader.getmany(tp, timeout_ms=500, max_records=5000)
            batch = [r for r in records(batches.get(tp, [])) if r.offset < end]
            if batch:
                yield batch
            if position != last:
                progress, last = time.monotonic(), position
            elif time.monotonic() - progress > stall_after:
                raise EventLogError(f"Kafka: {where}: no progress at {position}")
    finally:
        await close(reader)
