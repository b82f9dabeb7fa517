"""Reading one partition of the Kafka log outside any consumer group (``EventLog.read``).

One reader consumer is kept between reads, since a freshness check reads a few records often
and starting a consumer costs a connection; a read while it is busy gets one of its own, closed
afterwards. A read that did not run to its end (an error, a caller that stopped early) closes its
reader rather than keep one in an unknown state.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition as KafkaTP

from consumers.eventlog.kafka.errors import translate
from consumers.eventlog.kafka.records import to_record
from consumers.eventlog.port import Record
from statemachine.errors import EventLogError

__all__ = ["PartitionReaders"]


class PartitionReaders:
    def __init__(
        self,
        new: Callable[[], AIOKafkaConsumer],
        stall_after: float,
        close: Callable[..., Awaitable[Any]],
    ) -> None:
        self._new = new
        self._stall_after = stall_after
        self._close = close
        self._idle: AIOKafkaConsumer | None = None
        self._open = True

    async def read(
        self, topic: str, partition: int, start: int, end: int
    ) -> AsyncIterator[list[Record]]:
        """Batches of ``topic``/``partition`` from ``start`` up to ``end`` (exclusive, which the
        caller has checked exists)."""
        tp = KafkaTP(topic, partition)
        reader, self._idle = self._idle, None
        fresh = reader is None
        if reader is None:
            reader = self._new()
        where = f"read {topic}/{partition}"
        done = False
        try:
            with translate(where):
                if fresh:
                    await reader.start()
                reader.assign([tp])
                reader.seek(tp, start)
            progress, last = time.monotonic(), -1
            while True:
                with translate(where):
                    position = await reader.position(tp)
                    if position >= end:  # judged by position: markers occupy offsets too
                        done = True
                        return
                    batches = await reader.getmany(tp, timeout_ms=500, max_records=5000)
                batch = [to_record(m) for m in batches.get(tp, ()) if m.offset < end]
                if batch:
                    yield batch
                if position != last:
                    progress, last = time.monotonic(), position
                elif time.monotonic() - progress > self._stall_after:
                    raise EventLogError(f"Kafka: {where}: no progress at {position}")
        finally:
            if done and self._open and self._idle is None:
                self._idle = reader
            else:
                await self._close(reader)

    async def close(self) -> None:
        """Close the kept reader; later reads each start and close their own."""
        self._open = False
        reader, self._idle = self._idle, None
        await self._close(reader)
