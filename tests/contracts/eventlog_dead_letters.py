"""The event log's dead-letter port (:class:`~consumers.eventlog.letters.DeadLetterBox`,
``log.dead_letters``), and the dead letters that the log's ``append`` and a consumer's
``commit`` route there: each bad source record is kept once on the dead-letter topic, with
every consumer's reason, however many consumers set it aside, at once, from several
processes, or again after a restart.

Its fixtures (``log``, ``topics``, ``open_log``) are
:class:`~tests.contracts.eventlog.EventLogFixtures`'; a second log opened on the same store
stands for another process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from consumers.eventlog.codec import dead_letter
from consumers.eventlog.dead_letters import read_dead_letter, read_reason_note
from consumers.eventlog.letters import DeadLetterBox
from consumers.eventlog.port import EventLog, OutRecord, Record, Topics
from statemachine.errors import EventLogError
from tests.contracts.eventlog import (
    EventLogFixtures,
    drain,
    next_offsets,
    read_all,
    records,
)

__all__ = ["DeadLetterBoxContract"]

Origin = tuple[str, int, int]


async def kept(log: EventLog, topics: Topics) -> dict[Origin, tuple[int, list[str]]]:
    """Per source record: how many dead letters (copies of the original) the topic holds,
    and every reason (the letters' and the notes'), in the order written."""
    out: dict[Origin, tuple[int, list[str]]] = {}
    for record in await read_all(log, topics.dead_letter):
        letter = read_dead_letter(record)
        if letter is not None and letter.origin is not None:
            copies, reasons = out.get(letter.origin, (0, []))
            out[letter.origin] = (copies + 1, reasons + [r for _, r in letter.reasons])
            continue
        note = read_reason_note(record)
        assert note is not None, f"neither a dead letter nor a reason note: {record}"
        copies, reasons = out.get(note.origin, (0, []))
        out[note.origin] = (copies, [*reasons, note.reason])
    return out


async def bad_records(log: EventLog, topics: Topics, count: int) -> list[Record]:
    await log.append(
        [OutRecord(topics.lifecycle, f"bad-{i}", b"\xffnot json") for i in range(count)]
    )
    return sorted(await read_all(log, topics.lifecycle), key=lambda r: r.key or "")


class DeadLetterBoxContract(EventLogFixtures):
    async def test_the_port_is_an_attribute_of_the_log(self, log: EventLog) -> None:
        assert isinstance(log.dead_letters, DeadLetterBox)

    async def test_consumers_setting_a_record_aside_at_once_keep_one_dead_letter(
        self, log: EventLog, topics: Topics
    ) -> None:
        await bad_records(log, topics, 3)
        groups = [("projector", False), ("reconciler", True), ("telemetry", False)]

        async def consume(group: str, transactional: bool) -> list[Record]:
            consumer = log.consumer(group, [topics.lifecycle], transactional=transactional)
            async with consumer:
                got = await drain(consumer, 3)
                for record in got:  # a transactional commit covers one input partition
                    letter = dead_letter(topics, record, group, "not valid JSON")
                    await consumer.commit(next_offsets([record]), [letter])
            return got

        seen = await asyncio.gather(*(consume(g, t) for g, t in groups))

        origins = {(r.topic, r.partition, r.offset) for r in seen[0]}
        # each consumer's reason, the same words or not (``list --consumer`` finds it by any)
        assert await kept(log, topics) == {o: (1, ["not valid JSON"] * 3) for o in origins}
        for group, _ in groups:  # every consumer moved past the records it set aside
            moved = await log.inspection.group_offsets(group, topics.lifecycle)
            assert moved == {p: o for (_, p), o in next_offsets(seen[0]).items()}

    async def test_another_consumers_reason_is_added_without_a_second_copy_a_known_one_not(
        self, log: EventLog, topics: Topics
    ) -> None:
        (bad,) = await bad_records(log, topics, 1)
        origin = (bad.topic, bad.partition, bad.offset)
        first = dead_letter(topics, bad, "projector", "not valid JSON")
        assert await log.dead_letters.set_aside([first]) == 1
        same = dead_letter(topics, bad, "reconciler", "not valid JSON")
        assert await log.dead_letters.set_aside([same]) == 1  # another consumer, same words
        other = dead_letter(topics, bad, "telemetry", "cannot be handled by telemetry: boom")
        assert await log.dead_letters.set_aside([other]) == 1
        assert await log.dead_letters.set_aside([other, same, first]) == 0

        assert await kept(log, topics) == {
            origin: (
                1,
                ["not valid JSON", "not valid JSON", "cannot be handled by telemetry: boom"],
            )
        }
        stored = [read_dead_letter(r) for r in await read_all(log, topics.dead_letter)]
        (letter,) = [s for s in stored if s is not None]
        assert letter.original == b"\xffnot json" and letter.source_key == "bad-0"
        notes = [read_reason_note(r) for r in await read_all(log, topics.dead_letter)]
        assert [(n.consumer, n.reason) for n in notes if n is not None] == [
            ("reconciler", "not valid JSON"),
            ("telemetry", "cannot be handled by telemetry: boom"),
        ]

    async def test_letters_of_one_batch_are_settled_among_themselves(
        self, log: EventLog, topics: Topics
    ) -> None:
        (bad,) = await bad_records(log, topics, 1)
        batch = [
            dead_letter(topics, bad, "projector", "one"),
            dead_letter(topics, bad, "projector", "one"),
            dead_letter(topics, bad, "rebuild", "two"),
        ]
        assert await log.dead_letters.set_aside(batch) == 2
        assert await kept(log, topics) == {
            (bad.topic, bad.partition, bad.offset): (1, ["one", "two"])
        }

    async def test_setting_aside_again_after_a_restart_adds_nothing(
        self, log: EventLog, topics: Topics, open_log: Callable[[], Awaitable[EventLog]]
    ) -> None:
        records_ = await bad_records(log, topics, 2)
        letters = [dead_letter(topics, r, "projector", "not valid JSON") for r in records_]
        await log.append(letters)  # append routes dead letters to the port
        await log.stop()

        restarted = await open_log()  # the consumer handles the records again
        await restarted.append(letters)
        assert await restarted.dead_letters.set_aside(letters) == 0
        found = await kept(restarted, topics)
        assert list(found.values()) == [(1, ["not valid JSON"])] * 2

    async def test_a_consumer_that_dies_between_setting_aside_and_committing_keeps_one(
        self, log: EventLog, topics: Topics, open_log: Callable[[], Awaitable[EventLog]]
    ) -> None:
        (bad,) = await bad_records(log, topics, 1)
        # given a consumer that set the record aside (what its commit does first) and died
        # before its offsets moved
        async with log.consumer("dying", [topics.lifecycle], transactional=True) as consumer:
            (got,) = await drain(consumer, 1)
            letter = dead_letter(topics, got, "dying", "not valid JSON")
            assert await log.dead_letters.set_aside([letter]) == 1
        await log.stop()
        assert await (await open_log()).inspection.group_offsets("dying", topics.lifecycle) == {}

        # when it restarts: the record comes again, and is set aside again with the commit
        restarted = await open_log()
        async with restarted.consumer("dying", [topics.lifecycle], transactional=True) as again:
            (same,) = await drain(again, 1)
            assert (same.partition, same.offset) == (bad.partition, bad.offset)
            await again.commit(
                next_offsets([same]), [dead_letter(topics, same, "dying", "not valid JSON")]
            )

        # then it is kept once, and the consumer moved on
        assert await kept(restarted, topics) == {
            (bad.topic, bad.partition, bad.offset): (1, ["not valid JSON"])
        }
        assert await restarted.inspection.group_offsets("dying", topics.lifecycle) == {
            bad.partition: bad.offset + 1
        }

    async def test_two_processes_setting_the_same_records_aside_at_once_keep_one_each(
        self, log: EventLog, topics: Topics, open_log: Callable[[], Awaitable[EventLog]]
    ) -> None:
        other = await open_log()
        records_ = await bad_records(log, topics, 6)
        mine = [dead_letter(topics, r, "projector", "not valid JSON") for r in records_]
        theirs = [dead_letter(topics, r, "telemetry", "telemetry: boom") for r in records_]

        async def one_at_a_time(box: EventLog, letters: list[OutRecord]) -> None:
            for letter in letters:
                await box.dead_letters.set_aside([letter])

        await asyncio.gather(one_at_a_time(log, mine), one_at_a_time(other, theirs))

        found = await kept(log, topics)
        assert set(found) == {(r.topic, r.partition, r.offset) for r in records_}
        for copies, reasons in found.values():
            assert copies == 1
            assert sorted(reasons) == ["not valid JSON", "telemetry: boom"]

    async def test_a_stopped_log_refuses_to_set_aside(self, log: EventLog, topics: Topics) -> None:
        (bad,) = await bad_records(log, topics, 1)
        await log.stop()
        with pytest.raises(EventLogError) as err:
            await log.dead_letters.set_aside([dead_letter(topics, bad, "p", "not valid JSON")])
        assert not err.value.retriable

    async def test_ordinary_records_beside_dead_letters_are_appended_as_ever(
        self, log: EventLog, topics: Topics
    ) -> None:
        (bad,) = await bad_records(log, topics, 1)
        letter = dead_letter(topics, bad, "projector", "not valid JSON")
        ordinary = records(topics.probe_requests, ["p-1"], 2)
        await log.append([ordinary[0], letter, ordinary[1], letter])
        assert [r.value for r in await read_all(log, topics.probe_requests)] == [
            o.value for o in ordinary
        ]
        assert len(await read_all(log, topics.dead_letter)) == 1
