"""The event log's inspection port (:class:`~consumers.eventlog.inspection.LogInspection`,
``log.inspection``): partitions and their offsets, reading a range of records outside any
group, one record by its position (:meth:`~LogInspection.record_at`), a partition backwards
(:meth:`~LogInspection.read_before`), a group's committed offsets; and the dead-letter topic
read back (dead letters and replay marks).

Its fixtures (``log``, ``topics``) are :class:`~tests.contracts.eventlog.EventLogFixtures`'.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from datetime import UTC, datetime

from consumers.eventlog.codec import dead_letter
from consumers.eventlog.dead_letters import (
    read_dead_letter,
    read_replay_mark,
    replay_mark,
)
from consumers.eventlog.inspection import LogInspection
from consumers.eventlog.port import EventLog, OutRecord, Record, Topics
from tests.contracts.eventlog import (
    EventLogFixtures,
    drain,
    next_offsets,
    read_range,
    records,
)

__all__ = ["LogInspectionContract"]


class LogInspectionContract(EventLogFixtures):
    async def test_the_port_is_an_attribute_of_the_log(self, log: EventLog) -> None:
        assert isinstance(log.inspection, LogInspection)

    async def test_end_offsets_count_the_records_of_each_partition(
        self, log: EventLog, topics: Topics
    ) -> None:
        keys = [f"audit-{i}" for i in range(8)]
        await log.append(records(topics.lifecycle, keys, 3))
        n = len(await log.inspection.partitions(topics.lifecycle))
        ends = await log.inspection.end_offsets(topics.lifecycle)
        expected: dict[int, int] = defaultdict(int)
        for key in keys:
            expected[log.partition_for(key, n)] += 3
        assert ends == {p: expected.get(p, 0) for p in range(n)}
        assert set((await log.inspection.end_offsets(topics.dead_letter)).values()) == {0}

    async def test_start_offsets_and_offsets_at_a_time(self, log: EventLog, topics: Topics) -> None:
        await log.append(records(topics.lifecycle, ["timed"], 4))
        n = len(await log.inspection.partitions(topics.lifecycle))
        p = log.partition_for("timed", n)
        await asyncio.sleep(0.05)
        middle_ms = int(time.time() * 1000)
        await asyncio.sleep(0.05)
        await log.append(records(topics.lifecycle, ["timed"], 2, tag="new"))
        whole = await read_range(log, topics.lifecycle, p, 0)
        offs = [r.offset for r in whole]
        end = (await log.inspection.end_offsets(topics.lifecycle))[p]
        assert (await log.inspection.start_offsets(topics.lifecycle))[p] == offs[0]
        assert (await log.inspection.offsets_at(topics.lifecycle, middle_ms))[p] == offs[4]
        assert (await log.inspection.offsets_at(topics.lifecycle, 0))[p] == offs[0]
        assert (await log.inspection.offsets_at(topics.lifecycle, middle_ms + 60_000))[p] == end
        empty = await log.inspection.start_offsets(topics.dead_letter)
        assert empty == await log.inspection.end_offsets(topics.dead_letter)

    async def test_group_offsets_are_those_committed_and_none_before(
        self, log: EventLog, topics: Topics
    ) -> None:
        await log.append(records(topics.lifecycle, ["grouped"], 3))
        assert await log.inspection.group_offsets("nobody", topics.lifecycle) == {}
        async with log.consumer("counted", [topics.lifecycle]) as consumer:
            got = await drain(consumer, 3)
            await consumer.commit(next_offsets(got[:2]))
        assert await log.inspection.group_offsets("counted", topics.lifecycle) == {
            got[1].partition: got[1].offset + 1
        }
        assert await log.inspection.group_offsets("counted", topics.probe_requests) == {}

    async def test_read_returns_exactly_the_requested_range(
        self, log: EventLog, topics: Topics
    ) -> None:
        await log.append(records(topics.lifecycle, ["ranged"], 10))
        n = len(await log.inspection.partitions(topics.lifecycle))
        p = log.partition_for("ranged", n)
        whole = await read_range(log, topics.lifecycle, p, 0)
        assert [r.value for r in whole] == [f"v:ranged:{i}".encode() for i in range(10)]
        offs = [r.offset for r in whole]
        assert await read_range(log, topics.lifecycle, p, offs[2], offs[7]) == whole[2:7]
        assert await read_range(log, topics.lifecycle, p, offs[3]) == whole[3:]
        assert await read_range(log, topics.lifecycle, p, offs[8], offs[9] + 100) == whole[8:]
        assert await read_range(log, topics.lifecycle, p, offs[5], offs[5]) == []
        assert await read_range(log, topics.lifecycle, p, offs[9] + 1) == []
        assert await read_range(log, topics.dead_letter, 0, 0) == []  # an empty partition

    async def test_read_without_end_stops_at_the_end_of_the_call(
        self, log: EventLog, topics: Topics
    ) -> None:
        await log.append(records(topics.lifecycle, ["growing"], 3))
        n = len(await log.inspection.partitions(topics.lifecycle))
        p = log.partition_for("growing", n)
        seen: list[Record] = []
        async for batch in log.inspection.read(topics.lifecycle, p, 0):
            seen.extend(batch)
            if len(seen) == 3:
                await log.append(records(topics.lifecycle, ["growing"], 1, tag="late"))
        assert len(seen) == 3

    async def test_record_at_finds_a_record_by_its_position(
        self, log: EventLog, topics: Topics
    ) -> None:
        await log.append(records(topics.lifecycle, ["pos"], 5))
        n = len(await log.inspection.partitions(topics.lifecycle))
        p = log.partition_for("pos", n)
        whole = await read_range(log, topics.lifecycle, p, 0)
        for record in whole:
            assert await log.inspection.record_at(topics.lifecycle, p, record.offset) == record
        end = (await log.inspection.end_offsets(topics.lifecycle))[p]
        assert await log.inspection.record_at(topics.lifecycle, p, end) is None
        assert await log.inspection.record_at(topics.lifecycle, p, end + 100) is None
        assert await log.inspection.record_at(topics.lifecycle, p, -1) is None
        assert (
            await log.inspection.record_at(topics.lifecycle, n + 5, 0) is None
        )  # no such partition

    async def test_read_before_reads_a_partition_backwards_in_pages(
        self, log: EventLog, topics: Topics
    ) -> None:
        # in several appends, so a Kafka log may place batches (and markers) between them
        for tag in ("a", "b", "c"):
            await log.append(records(topics.dead_letter, ["back"], 4, tag=tag))
        p = log.partition_for("back", len(await log.inspection.partitions(topics.dead_letter)))
        whole = await read_range(log, topics.dead_letter, p, 0)
        newest_first = list(reversed(whole))
        assert await log.inspection.read_before(topics.dead_letter, p, None, 5) == newest_first[:5]
        pages, before = [], None
        while page := await log.inspection.read_before(topics.dead_letter, p, before, 5):
            pages.append(page)
            before = page[-1].offset
        assert [len(page) for page in pages] == [5, 5, 2]
        assert [r for page in pages for r in page] == newest_first
        assert await log.inspection.read_before(topics.dead_letter, p, whole[0].offset, 5) == []
        assert await log.inspection.read_before(topics.dead_letter, p, None, 0) == []

    async def test_read_before_skips_the_gaps_of_transactional_commits(
        self, log: EventLog, topics: Topics
    ) -> None:
        # outputs of transactional commits, one a commit: on Kafka each leaves a marker's gap
        await log.append(records(topics.lifecycle, ["in"], 6))
        async with log.consumer("gappy", [topics.lifecycle], transactional=True) as consumer:
            for record in await drain(consumer, 6):
                out = OutRecord(topics.dead_letter, "gap", record.value)
                await consumer.commit(next_offsets([record]), [out])
        p = log.partition_for("gap", len(await log.inspection.partitions(topics.dead_letter)))
        whole = await read_range(log, topics.dead_letter, p, 0)
        assert len(whole) == 6
        newest = await log.inspection.read_before(topics.dead_letter, p, None, 4)
        assert newest == list(reversed(whole))[:4]

    async def test_a_dead_letter_and_its_replay_mark_read_back(
        self, log: EventLog, topics: Topics
    ) -> None:
        await log.append([OutRecord(topics.lifecycle, "a-dl", b'{"type": "AuditStarted"')])
        async with log.consumer("strict", [topics.lifecycle]) as consumer:
            (bad,) = await drain(consumer, 1)
            letter_out = dead_letter(topics, bad, "strict", "not valid JSON: cut short")
            await consumer.commit(next_offsets([bad]), [letter_out])
        dlp = log.partition_for(
            letter_out.key, len(await log.inspection.partitions(topics.dead_letter))
        )
        (stored,) = await read_range(log, topics.dead_letter, dlp, 0)
        letter = read_dead_letter(stored)
        assert letter is not None
        assert (letter.partition, letter.offset) == (stored.partition, stored.offset)
        assert letter.origin == (topics.lifecycle, bad.partition, bad.offset)
        assert (letter.consumer, letter.reason) == ("strict", "not valid JSON: cut short")
        assert letter.original == b'{"type": "AuditStarted"'
        assert letter.original_text() == ("text", '{"type": "AuditStarted"')
        assert not letter.truncated and letter.source_key == "a-dl"
        assert letter.reasons == (("strict", "not valid JSON: cut short"),)
        assert read_replay_mark(stored) is None

        at = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
        mark = replay_mark(
            topics.dead_letter, letter, "e-1", topics.lifecycle, "me", at, corrected=True
        )
        await log.append([mark])
        marks = await read_range(log, topics.dead_letter, stored.partition, stored.offset + 1)
        (got,) = marks  # keyed as the dead letter: the same partition, after it
        assert read_dead_letter(got) is None
        read = read_replay_mark(got)
        assert read is not None
        assert read.origin == letter.origin and read.dead_letter == letter.position
        assert (read.event_id, read.actor, read.corrected) == ("e-1", "me", True)
        assert json.loads(got.value)["at"] == "2026-12-01T09:00:00Z"
