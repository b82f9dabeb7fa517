"""What the Kafka log holds, read outside any consumer group (the inspection port, documented
in ``eventlog/inspection.py``), on the log's own clients (``log.py``):

- partitions come from the topic's metadata; a topic that does not exist is a non-retriable
  :class:`~statemachine.errors.EventLogError` naming ``auditrec init``;
- end offsets are last stable offsets (everything is read ``read_committed``), start offsets
  the log start offsets (``DeleteRecords`` moves them), offsets at a time ``ListOffsets`` by
  timestamp;
- a group's offsets are a stable ``OffsetFetch`` (``offsets.py``): it waits for the
  transactions pending on the partitions asked about;
- :meth:`KafkaInspection.read` starts a consumer of its own per read (``reading.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition as KafkaTP

from consumers.eventlog.inspection import LogInspection
from consumers.eventlog.kafka.errors import translate
from consumers.eventlog.kafka.offsets import fetch_group_offsets
from consumers.eventlog.kafka.reading import read_partition
from consumers.eventlog.values import Record
from statemachine.errors import EventLogError

__all__ = ["KafkaClients", "KafkaInspection"]


class KafkaClients(Protocol):
    """What the ports use of the log that holds them (:class:`~consumers.eventlog.kafka.log.
    KafkaEventLog`): its started clients, new consumers, and closing clients."""

    request_timeout_ms: int

    def _started(self) -> tuple[Any, Any, AIOKafkaConsumer]: ...

    def _new_consumer(self, group: str | None, **options: Any) -> AIOKafkaConsumer: ...

    async def _close(self, *clients: Any) -> None: ...


class KafkaInspection(LogInspection):
    def __init__(self, log: KafkaClients) -> None:
        self.log = log

    async def partitions(self, topic: str) -> list[int]:
        _, admin, _ = self.log._started()
        with translate(f"describe topic {topic}"):
            described: list[dict[str, Any]] = await admin.describe_topics([topic])
        for t in described:
            if t["topic"] == topic and t["error_code"] == 0:
                return sorted(p["partition"] for p in t["partitions"])
        raise EventLogError(
            f"Kafka: topic {topic} does not exist (run `auditrec init`)", retriable=False
        )

    async def end_offsets(self, topic: str) -> dict[int, int]:
        _, _, meta = self.log._started()
        tps = [KafkaTP(topic, p) for p in await self.partitions(topic)]
        with translate(f"end offsets of {topic}"):
            ends = await meta.end_offsets(tps)
        return {tp.partition: offset for tp, offset in ends.items()}

    async def start_offsets(self, topic: str) -> dict[int, int]:
        _, _, meta = self.log._started()
        tps = [KafkaTP(topic, p) for p in await self.partitions(topic)]
        with translate(f"start offsets of {topic}"):
            starts = await meta.beginning_offsets(tps)
        return {tp.partition: offset for tp, offset in starts.items()}

    async def offsets_at(self, topic: str, at_ms: int) -> dict[int, int]:
        _, _, meta = self.log._started()
        ends = await self.end_offsets(topic)
        with translate(f"offsets of {topic} at {at_ms}"):
            found = await meta.offsets_for_times({KafkaTP(topic, p): at_ms for p in ends})
        return {
            tp.partition: ends[tp.partition] if hit is None else hit.offset
            for tp, hit in found.items()
        }

    async def group_offsets(self, group: str, topic: str) -> dict[int, int]:
        return await self.committed_offsets(group, topic, await self.partitions(topic))

    async def committed_offsets(
        self, group: str, topic: str, partitions: Sequence[int], *, stable: bool = True
    ) -> dict[int, int]:
        """:meth:`group_offsets` of some partitions only (a stable read waits for the
        transactions pending on the partitions asked about, and only on those)."""
        _, admin, _ = self.log._started()
        with translate(f"offsets of group {group} on {topic}"):
            return await fetch_group_offsets(admin, group, topic, sorted(partitions), stable=stable)

    async def read(
        self, topic: str, partition: int, start: int, end: int | None = None
    ) -> AsyncIterator[list[Record]]:
        ends = await self.end_offsets(topic)
        if partition not in ends:
            raise EventLogError(f"Kafka: {topic}/{partition} does not exist", retriable=False)
        end = ends[partition] if end is None else min(end, ends[partition])
        if start >= end:
            return
        reader = self.log._new_consumer(None)
        stall = self.log.request_timeout_ms / 1000
        reading = read_partition(
            reader, topic, partition, start, end, stall_after=stall, close=self.log._close
        )
        async for batch in reading:
            yield batch
