"""What the Kafka log knows about the start of its partitions: the first offset still held,
the offset at a time, and deleting what comes before an offset (``DeleteRecords``).

The lifecycle topic itself keeps everything (``retention.ms=-1``): records are only ever
deleted by :meth:`~consumers.eventlog.kafka.log.KafkaEventLog.trim`, which auditrec calls with
offsets that every consumer's checkpoint has passed (see
:mod:`consumers.components.retention`), so a time-based retention can never delete what a
restart still needs.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.structs import TopicPartition as KafkaTP

from consumers.eventlog.kafka.errors import translate

__all__ = ["delete_before", "offsets_at", "start_offsets"]


async def start_offsets(
    meta: AIOKafkaConsumer, topic: str, partitions: list[int]
) -> dict[int, int]:
    tps = [KafkaTP(topic, p) for p in partitions]
    with translate(f"start offsets of {topic}"):
        starts = await meta.beginning_offsets(tps)
    return {tp.partition: offset for tp, offset in starts.items()}


async def offsets_at(
    meta: AIOKafkaConsumer, topic: str, ends: Mapping[int, int], at_ms: int
) -> dict[int, int]:
    with translate(f"offsets of {topic} at {at_ms}"):
        found = await meta.offsets_for_times({KafkaTP(topic, p): at_ms for p in ends})
    return {
        tp.partition: ends[tp.partition] if hit is None else hit.offset for tp, hit in found.items()
    }


async def delete_before(
    admin: AIOKafkaAdminClient, topic: str, before: Mapping[int, int], ends: Mapping[int, int]
) -> None:
    wanted = {
        KafkaTP(topic, p): RecordsToDelete(before_offset=min(offset, max(ends[p] - 1, 0)))
        for p, offset in before.items()
        if p in ends and offset > 0
    }
    if wanted:
        with translate(f"delete records of {topic}"):
            await admin.delete_records(wanted)
