"""The event log's retention port (:class:`~consumers.eventlog.retention.LogRetention`,
``log.retention``): trimming a partition's oldest records, never its last one, never reusing an
offset.

Its fixtures (``log``, ``topics``) are :class:`~tests.contracts.eventlog.EventLogFixtures`';
what a trim left is read with the inspection port.
"""

from __future__ import annotations

import asyncio
import time

from consumers.eventlog.port import EventLog, Topics
from consumers.eventlog.retention import LogRetention
from tests.contracts.eventlog import EventLogFixtures, read_range, records

__all__ = ["LogRetentionContract"]


class LogRetentionContract(EventLogFixtures):
    async def test_the_port_is_an_attribute_of_the_log(self, log: EventLog) -> None:
        assert isinstance(log.retention, LogRetention)

    async def test_trim_deletes_before_an_offset_but_never_the_last_record(
        self, log: EventLog, topics: Topics
    ) -> None:
        await log.append(records(topics.lifecycle, ["old"], 4))
        n = len(await log.inspection.partitions(topics.lifecycle))
        p = log.partition_for("old", n)
        await asyncio.sleep(0.05)
        middle_ms = int(time.time() * 1000)
        await asyncio.sleep(0.05)
        await log.append(records(topics.lifecycle, ["old"], 2, tag="new"))
        whole = await read_range(log, topics.lifecycle, p, 0)
        offs = [r.offset for r in whole]
        end = (await log.inspection.end_offsets(topics.lifecycle))[p]
        assert (await log.inspection.start_offsets(topics.lifecycle))[p] == offs[0]
        assert (await log.inspection.offsets_at(topics.lifecycle, middle_ms))[p] == offs[4]
        assert (await log.inspection.offsets_at(topics.lifecycle, middle_ms + 60_000))[p] == end

        await log.retention.trim(topics.lifecycle, {p: offs[4]})

        assert (await log.inspection.start_offsets(topics.lifecycle))[p] == offs[4]
        assert await read_range(log, topics.lifecycle, p, 0) == whole[4:]
        await log.retention.trim(topics.lifecycle, {p: end + 10})  # past the end: all but the last
        assert await read_range(log, topics.lifecycle, p, 0) == whole[5:]
        await log.append(records(topics.lifecycle, ["old"], 1, tag="after"))
        [*_, last] = await read_range(log, topics.lifecycle, p, 0)
        assert last.offset >= end and last.value == b"after:old:0"  # offsets never reused

    async def test_record_at_of_a_trimmed_offset_is_none(
        self, log: EventLog, topics: Topics
    ) -> None:
        await log.append(records(topics.lifecycle, ["gone"], 3))
        p = log.partition_for("gone", len(await log.inspection.partitions(topics.lifecycle)))
        first, *_, last = await read_range(log, topics.lifecycle, p, 0)
        await log.retention.trim(topics.lifecycle, {p: last.offset})
        assert await log.inspection.record_at(topics.lifecycle, p, first.offset) is None
        assert await log.inspection.record_at(topics.lifecycle, p, last.offset) == last

    async def test_a_trim_at_or_before_the_start_deletes_nothing(
        self, log: EventLog, topics: Topics
    ) -> None:
        await log.append(records(topics.lifecycle, ["kept"], 3))
        n = len(await log.inspection.partitions(topics.lifecycle))
        p = log.partition_for("kept", n)
        whole = await read_range(log, topics.lifecycle, p, 0)
        await log.retention.trim(topics.lifecycle, {})
        await log.retention.trim(topics.lifecycle, {p: 0})
        await log.retention.trim(topics.lifecycle, {n + 5: 2})  # no such partition
        await log.retention.trim(topics.dead_letter, {0: 10})  # an empty topic
        assert await read_range(log, topics.lifecycle, p, 0) == whole
        assert (await log.inspection.start_offsets(topics.lifecycle))[p] == whole[0].offset
