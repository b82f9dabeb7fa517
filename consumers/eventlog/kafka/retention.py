"""Trimming the Kafka log (the retention port, documented in ``eventlog/retention.py``):
deleting what comes before an offset with ``DeleteRecords``, on the log's admin client.

The lifecycle topic itself keeps everything (``retention.ms=-1``): records are only ever
deleted by :meth:`KafkaRetention.trim`, which auditrec calls with offsets that every
consumer's checkpoint has passed (see :mod:`consumers.components.retention`), so a time-based
retention can never delete what a restart still needs.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiokafka.admin import RecordsToDelete
from aiokafka.structs import TopicPartition as KafkaTP

from consumers.eventlog.kafka.errors import translate
from consumers.eventlog.kafka.inspection import KafkaClients, KafkaInspection
from consumers.eventlog.retention import LogRetention

__all__ = ["KafkaRetention"]


class KafkaRetention(LogRetention):
    def __init__(self, log: KafkaClients, inspection: KafkaInspection) -> None:
        self.log = log
        self.inspection = inspection

    async def trim(self, topic: str, before: Mapping[int, int]) -> None:
        _, admin, _ = self.log._started()
        ends = await self.inspection.end_offsets(topic)
        wanted = {
            KafkaTP(topic, p): RecordsToDelete(before_offset=min(offset, max(ends[p] - 1, 0)))
            for p, offset in before.items()
            if p in ends and offset > 0
        }
        if wanted:
            with translate(f"delete records of {topic}"):
                await admin.delete_records(wanted)
