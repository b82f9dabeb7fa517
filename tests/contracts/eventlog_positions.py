"""The event log contract, continued: reading records by position — one record
(:meth:`EventLog.record_at`), a partition backwards (:meth:`EventLog.read_before`) — and the
dead-letter topic read back (dead letters and replay marks).

A mixin of the backends' test classes beside :class:`~tests.contracts.eventlog.EventLogContract`,
whose fixtures (``log``, ``topics``) it uses.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from consumers.eventlog.codec import dead_letter
from consumers.eventlog.dead_letters import (
    read_dead_letter,
    read_replay_mark,
    replay_mark,
)
from consumers.eventlog.port import EventLog, OutRecord, Topics
from tests.contracts.eventlog import drain, next_offsets, read_range, records

__all__ = ["PositionReadsContract"]


class PositionReadsContract:
    async def test_record_at_finds_a_record_by_its_position(
        self, log: EventLog, topics: Topics
    ) -> None:
        await log.append(records(topics.lifecycle, ["pos"], 5))
        n = len(await log.partitions(topics.lifecycle))
        p = log.partition_for("pos", n)
        whole = await read_range(log, topics.lifecycle, p, 0)
        for record in whole:
            assert await log.record_at(topics.lifecycle, p, record.offset) == record
        end = (await log.end_offsets(topics.lifecycle))[p]
        assert await log.record_at(topics.lifecycle, p, end) is None
        assert await log.record_at(topics.lifecycle, p, end + 100) is None
        assert await log.record_at(topics.lifecycle, p, -1) is None
        assert await log.record_at(topics.lifecycle, n + 5, 0) is None  # no such partition

    async def test_record_at_of_a_trimmed_offset_is_none(
        self, log: EventLog, topics: Topics
    ) -> None:
        await log.append(records(topics.lifecycle, ["gone"], 3))
        p = log.partition_for("gone", len(await log.partitions(topics.lifecycle)))
        first, *_, last = await read_range(log, topics.lifecycle, p, 0)
        await log.trim(topics.lifecycle, {p: last.offset})
        assert await log.record_at(topics.lifecycle, p, first.offset) is None
        assert await log.record_at(topics.lifecycle, p, last.offset) == last

    async def test_read_before_reads_a_partition_backwards_in_pages(
        self, log: EventLog, topics: Topics
    ) -> None:
        # in several appends, so a Kafka log may place batches (and markers) between them
        for tag in ("a", "b", "c"):
            await log.append(records(topics.dead_letter, ["back"], 4, tag=tag))
        p = log.partition_for("back", len(await log.partitions(topics.dead_letter)))
        whole = await read_range(log, topics.dead_letter, p, 0)
        newest_first = list(reversed(whole))
        assert await log.read_before(topics.dead_letter, p, None, 5) == newest_first[:5]
        pages, before = [], None
        while page := await log.read_before(topics.dead_letter, p, before, 5):
            pages.append(page)
            before = page[-1].offset
        assert [len(page) for page in pages] == [5, 5, 2]
        assert [r for page in pages for r in page] == newest_first
        assert await log.read_before(topics.dead_letter, p, whole[0].offset, 5) == []
        assert await log.read_before(topics.dead_letter, p, None, 0) == []

    async def test_read_before_skips_the_gaps_of_transactional_commits(
        self, log: EventLog, topics: Topics
    ) -> None:
        # outputs of transactional commits, one a commit: on Kafka each leaves a marker's gap
        await log.append(records(topics.lifecycle, ["in"], 6))
        async with log.consumer("gappy", [topics.lifecycle], transactional=True) as consumer:
            for record in await drain(consumer, 6):
                out = OutRecord(topics.dead_letter, "gap", record.value)
                await consumer.commit(next_offsets([record]), [out])
        p = log.partition_for("gap", len(await log.partitions(topics.dead_letter)))
        whole = await read_range(log, topics.dead_letter, p, 0)
        assert len(whole) == 6
        newest = await log.read_before(topics.dead_letter, p, None, 4)
        assert newest == list(reversed(whole))[:4]

    async def test_a_dead_letter_and_its_replay_mark_read_back(
        self, log: EventLog, topics: Topics
    ) -> None:
        await log.append([OutRecord(topics.lifecycle, "a-dl", b'{"type": "AuditStarted"')])
        async with log.consumer("strict", [topics.lifecycle]) as consumer:
            (bad,) = await drain(consumer, 1)
            letter_out = dead_letter(topics, bad, "strict", "not valid JSON: cut short")
            await consumer.commit(next_offsets([bad]), [letter_out])
        dlp = log.partition_for("a-dl", len(await log.partitions(topics.dead_letter)))
        (stored,) = await read_range(log, topics.dead_letter, dlp, 0)
        letter = read_dead_letter(stored)
        assert letter is not None
        assert (letter.partition, letter.offset) == (stored.partition, stored.offset)
        assert letter.origin == (topics.lifecycle, bad.partition, bad.offset)
        assert (letter.consumer, letter.reason) == ("strict", "not valid JSON: cut short")
        assert letter.original == b'{"type": "AuditStarted"'
        assert letter.original_text() == ("text", '{"type": "AuditStarted"')
        assert not letter.truncated and letter.key == "a-dl"
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
