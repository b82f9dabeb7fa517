"""The projector on each backend pair: it folds what the log holds into the ``audits`` table
and its history, once per event, from the offsets the store keeps, and sets aside what it
cannot decode."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Sequence
from typing import Any

import pytest

from consumers.components.projector import Projector, split_lanes
from consumers.eventlog.codec import encode
from consumers.eventlog.port import OutRecord, Record
from statemachine.errors import StoreError
from statemachine.events import AuditEvent
from tests.conftest import BACKEND_PAIRS
from tests.contracts.projection_store import (
    at,
    completed,
    progressed,
    pure_fold,
    same_row,
    started,
)
from tests.eventually import eventually
from tests.interleavings import AUDITS, IDS, PRODUCERS, event_of, expected_of
from tests.pipeline import OverlappingWrites, Pipeline, append, read_topic, run_until_idle


async def step_until_it_fails(projector: Projector) -> None:
    """Step until a step raises (a write's failure surfaces in the step after it, at most)."""
    while True:
        await projector.step()


async def assert_applied_once(pipeline: Pipeline, events: Sequence[AuditEvent]) -> None:
    """Each audit's row is the fold of its events, and its history is its events, in order:
    each event applied exactly once."""
    for audit_id, expected in pure_fold(events).items():
        assert same_row(await pipeline.store.audits.get(audit_id), expected)
        history = [h.event for h in await pipeline.store.audits.history(audit_id)]
        assert history == [e for e in events if e.audit_id == audit_id]


async def test_a_batch_is_folded_into_rows_history_and_stored_offsets(pipeline: Pipeline) -> None:
    # given two audits' events in the log
    events = [
        started("a-done", at(0), pages_total=10),
        started("a-run", at(1), instance="wf-run"),
        progressed("a-done", at(2), current_phase="crawl", pages_crawled=4),
        progressed("a-run", at(3), pages_crawled=1),
        completed("a-done", at(4), pages_crawled=10),
    ]
    await append(pipeline.log, pipeline.topics.lifecycle, events)

    # when the projector has caught up
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        await run_until_idle(projector)

    # then each row is the fold of its audit's events
    done = await pipeline.store.audits.get("a-done")
    run = await pipeline.store.audits.get("a-run")
    assert done is not None and run is not None
    assert (done.status, done.version, done.state.pages_crawled) == ("completed", 3, 10)
    assert (run.status, run.version, run.state.pages_crawled) == ("running", 2, 1)
    assert run.state.workflow_instance_id == "wf-run"
    assert done.last_event_id == events[-1].event_id
    assert [h.event for h in await pipeline.store.audits.history("a-done")] == events[0::2]
    assert projector.applied == 5
    # and the offsets kept with the rows are the log's end offsets
    ends = await pipeline.log.inspection.end_offsets(pipeline.topics.lifecycle)
    stored = await pipeline.store.writer.stored_offsets(pipeline.topics.group(Projector.name))
    assert {p: stored.get((pipeline.topics.lifecycle, p), 0) for p in ends} == ends


async def test_an_event_applied_before_is_skipped_when_it_comes_again(pipeline: Pipeline) -> None:
    # given an audit projected with two events
    first = started("a-1", at(0))
    step = progressed("a-1", at(1), pages_crawled=3)
    await append(pipeline.log, pipeline.topics.lifecycle, [first, step])
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        await run_until_idle(projector)
        before = await pipeline.store.audits.get("a-1")

        # when the same event (same event_id) is appended again, then a new one
        later = progressed("a-1", at(2), pages_crawled=5)
        await append(pipeline.log, pipeline.topics.lifecycle, [step, later])
        await run_until_idle(projector)

    # then the copy changed nothing and only the new event was applied
    row = await pipeline.store.audits.get("a-1")
    assert before is not None and before.version == 2
    assert row is not None and row.version == 3 and row.state.pages_crawled == 5
    assert [h.event for h in await pipeline.store.audits.history("a-1")] == [first, step, later]
    assert projector.applied == 3


async def test_on_assignment_it_seeks_to_the_offsets_the_store_holds(pipeline: Pipeline) -> None:
    # given a log with an audit's events, whose offsets the store says are done already
    # (as after a crash between the store's commit and the log's), and a later audit
    topic = pipeline.topics.lifecycle
    await append(pipeline.log, topic, [started("a-before", at(0)), progressed("a-before", at(1))])
    done = {(r.topic, r.partition): r.offset + 1 for r in await read_topic(pipeline.log, topic)}
    await pipeline.store.writer.apply([], done, pipeline.topics.group(Projector.name))
    await append(pipeline.log, topic, [started("a-after", at(2))])

    # when a projector is assigned the partitions
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        await run_until_idle(projector)

    # then it read from the stored offsets on: the earlier records were never read again
    assert await pipeline.store.audits.get("a-before") is None
    assert await pipeline.store.audits.history("a-before") == []
    after = await pipeline.store.audits.get("a-after")
    assert after is not None and after.version == 1
    assert projector.applied == 1


async def test_an_undecodable_record_is_dead_lettered_and_the_rest_applied(
    pipeline: Pipeline,
) -> None:
    # given a record that is not an event between two that are
    topic = pipeline.topics.lifecycle
    good = [started("a-1", at(0)), progressed("a-1", at(1), pages_crawled=2)]
    await pipeline.log.append(
        [encode(topic, good[0]), OutRecord(topic, "a-1", b"\xffnot json"), encode(topic, good[1])]
    )

    # when the projector has caught up
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        await run_until_idle(projector)

    # then the bad record is in the dead-letter topic with where it came from and why
    [letter] = await read_topic(pipeline.log, pipeline.topics.dead_letter)
    body = json.loads(letter.value)
    [bad] = [r for r in await read_topic(pipeline.log, topic) if r.value == b"\xffnot json"]
    assert letter.key == f"{topic}:{bad.partition}:{bad.offset}" and body["key"] == "a-1"
    assert body["consumer"] == pipeline.topics.group(Projector.name)
    assert (body["source_topic"], body["source_partition"], body["source_offset"]) == (
        topic,
        bad.partition,
        bad.offset,
    )
    assert "JSON" in body["error"]
    assert projector.dead_lettered == 1
    # and the good events around it were applied, with the offsets past all three
    row = await pipeline.store.audits.get("a-1")
    assert row is not None and row.version == 2 and row.state.pages_crawled == 2
    stored = await pipeline.store.writer.stored_offsets(pipeline.topics.group(Projector.name))
    assert stored[(topic, bad.partition)] == bad.offset + 2


async def test_an_event_the_store_refuses_is_set_aside_and_the_rest_of_its_batch_proceeds(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a batch in which the store refuses one event for good (as a value it cannot hold)
    topic = pipeline.topics.lifecycle
    events = [started("a-1", at(0)), started("a-poison", at(1)), started("a-2", at(2))]
    await append(pipeline.log, topic, events)
    real_apply = pipeline.store.writer.apply

    async def refusing(batch: Any, *args: Any, **kwargs: Any) -> Any:
        if any(event.audit_id == "a-poison" for event, _ in batch):
            raise StoreError("integer out of range", retriable=False)
        return await real_apply(batch, *args, **kwargs)

    monkeypatch.setattr(pipeline.store.writer, "apply", refusing)

    # when the projector has caught up
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        await run_until_idle(projector)

    # then the others are projected, the refused one is a dead letter with the store's reason
    assert await pipeline.store.audits.get("a-1") is not None
    assert await pipeline.store.audits.get("a-2") is not None
    assert await pipeline.store.audits.get("a-poison") is None
    [letter] = await read_topic(pipeline.log, pipeline.topics.dead_letter)
    body = json.loads(letter.value)
    assert body["key"] == "a-poison"
    assert "cannot be applied to the projection" in body["error"]
    assert "integer out of range" in body["error"]
    # and the offsets are past the whole batch: nothing is read again
    stored = await pipeline.store.writer.stored_offsets(pipeline.topics.group(Projector.name))
    ends = await pipeline.log.inspection.end_offsets(topic)
    assert all(stored.get((topic, p), 0) >= end for p, end in ends.items() if end)


async def test_a_store_that_is_down_is_retried_not_set_aside(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a store that is unreachable for one try
    await append(pipeline.log, pipeline.topics.lifecycle, [started("a-1", at(0))])
    real_apply = pipeline.store.writer.apply
    failures = [StoreError("connection refused", retriable=True)]

    async def flaky(*args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return await real_apply(*args, **kwargs)

    monkeypatch.setattr(pipeline.store.writer, "apply", flaky)

    # when the projector steps: a step raises once the write failed (the batch's own step, or
    # the next one when the write was still in flight); the supervisor backs off and restarts
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        with pytest.raises(StoreError):
            await asyncio.wait_for(step_until_it_fails(projector), 10)
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        await run_until_idle(projector)

    # then nothing was set aside, and the event is projected on the next try
    assert await read_topic(pipeline.log, pipeline.topics.dead_letter) == []
    assert await pipeline.store.audits.get("a-1") is not None


async def test_a_batch_polled_while_its_partition_was_sought_is_read_again_from_the_seek(
    pipeline: Pipeline,
) -> None:
    # given six events, and a projector holding the batch it polled
    events = [started(f"gap-{i}", at(0)) for i in range(6)]
    await append(pipeline.log, pipeline.topics.lifecycle, events)
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        projector.poll_timeout = 0.05
        assert projector.consumer is not None

        async def settled_batch() -> list[Record]:
            """A batch no assignment sought meanwhile (the group may still be settling:
            a batch it sought is read again, and so is the rest of it, put back here)."""
            batch = await projector.poll()
            if batch and projector.not_sought_since(batch, projector.polled_at) != batch:
                for tp in {(r.topic, r.partition) for r in batch}:
                    first = min(r.offset for r in batch if (r.topic, r.partition) == tp)
                    projector.consumer.seek(tp, first)
                return []
            return batch

        polled = await eventually(settled_batch, until=bool, message="a settled batch")
        mark = projector.polled_at
        assert projector.not_sought_since(polled, mark) == polled  # nothing sought since

        # when an assignment seeks its partitions meanwhile (before the batch lock is had)
        for tp in {(r.topic, r.partition) for r in polled}:
            projector.seek(projector.consumer, tp, 0)

        # then the batch in hand is not handled as it is …
        assert projector.not_sought_since(polled, mark) == []

        # … and nothing of it is lost: the partition is read again from the seek
        await run_until_idle(projector)
    rows = {r.audit_id async for r in pipeline.store.audits.iter_rows()}
    assert rows == {f"gap-{i}" for i in range(6)}


async def test_a_large_batch_is_applied_in_parts_each_with_the_offsets_it_reaches(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given eleven events of four audits in the log, and a projector applying parts of three
    topic = pipeline.topics.lifecycle
    events = [started(f"a-{i}", at(i)) for i in range(4)]
    events += [progressed(f"a-{i % 4}", at(10 + i), pages_crawled=i) for i in range(5)]
    events += [completed("a-0", at(20)), completed("a-3", at(21))]
    await append(pipeline.log, topic, events)
    real_apply = pipeline.store.writer.apply
    calls: list[tuple[int, dict[tuple[str, int], int]]] = []

    async def counting(batch: Any, offsets: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append((len(batch), dict(offsets)))
        return await real_apply(batch, offsets, *args, **kwargs)

    monkeypatch.setattr(pipeline.store.writer, "apply", counting)

    # when the projector has caught up
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        projector.part_size = 3
        await run_until_idle(projector)

    # then no transaction held more than a part, and each stored the offsets its part reached
    assert calls and max(n for n, _ in calls) <= 3 and sum(n for n, _ in calls) == len(events)
    assert all(offsets for _, offsets in calls)
    # and the rows and histories are those of one batch: each event applied once, in order
    await assert_applied_once(pipeline, events)
    assert projector.applied == len(events)
    ends = await pipeline.log.inspection.end_offsets(topic)
    stored = await pipeline.store.writer.stored_offsets(pipeline.topics.group(Projector.name))
    assert {p: stored.get((topic, p), 0) for p in ends} == ends


def fail_on_write(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, nth: int) -> None:
    """The store goes down (a retriable error) on its ``nth`` write, and only then."""
    real_apply = pipeline.store.writer.apply
    writes = 0

    async def apply(*args: Any, **kwargs: Any) -> Any:
        nonlocal writes
        writes += 1
        if writes == nth:
            raise StoreError("connection reset", retriable=True)
        return await real_apply(*args, **kwargs)

    monkeypatch.setattr(pipeline.store.writer, "apply", apply)


async def test_a_store_failing_in_a_later_part_keeps_the_parts_before_and_loses_nothing(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given eight audits started in the log, and a store that goes down on the third part
    topic = pipeline.topics.lifecycle
    events = [started(f"b-{i}", at(i)) for i in range(8)]
    await append(pipeline.log, topic, events)
    fail_on_write(pipeline, monkeypatch, 3)

    # when a projector with parts of two fails in the middle of the batch, and another resumes
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        projector.part_size = 2
        with pytest.raises(StoreError):
            await asyncio.wait_for(step_until_it_fails(projector), 10)
    committed = sum((await pipeline.store.writer.stored_offsets(projector.group)).values())
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        await run_until_idle(projector)

    # then the parts before the failure had been kept with their offsets …
    assert committed >= 4
    # … and in the end each event is applied exactly once
    for event in events:
        assert [h.event for h in await pipeline.store.audits.history(event.audit_id)] == [event]
    assert projector.applied == len(events) - committed


async def test_a_record_set_aside_before_a_failed_part_is_never_lost(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given an audit's events with a record that is not an event in the first part of two,
    # and a store that goes down on the second part
    topic = pipeline.topics.lifecycle
    good = [started("d-1", at(0))] + [progressed("d-1", at(i), pages_crawled=i) for i in (1, 2)]
    await pipeline.log.append(
        [encode(topic, good[0]), OutRecord(topic, "d-1", b"\xffnot json")]
        + [encode(topic, e) for e in good[1:]]
    )
    fail_on_write(pipeline, monkeypatch, 2)

    # when a projector with parts of two fails after the first part, and another resumes
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        projector.part_size = 2
        with pytest.raises(StoreError):
            await asyncio.wait_for(step_until_it_fails(projector), 10)
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        await run_until_idle(projector)

    # then the bad record is set aside, though the store had moved past it before the failure
    letters = await read_topic(pipeline.log, pipeline.topics.dead_letter)
    assert [json.loads(letter.value)["source_offset"] for letter in letters] == [1]
    assert [h.event for h in await pipeline.store.audits.history("d-1")] == good


class GatedStore:
    """Holds the store's writes until its gate is set; records the offsets of each batch."""

    def __init__(self, pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
        self.real_apply = pipeline.store.writer.apply
        self.gate = asyncio.Event()
        self.started: list[list[int]] = []
        self.done: list[list[int]] = []
        monkeypatch.setattr(pipeline.store.writer, "apply", self.apply)

    async def apply(self, batch: Any, *args: Any, **kwargs: Any) -> Any:
        offsets = [position[2] for _, position in batch]
        self.started.append(offsets)
        await self.gate.wait()
        result = await self.real_apply(batch, *args, **kwargs)
        self.done.append(offsets)
        return result


async def test_the_next_batches_are_polled_and_decoded_while_the_last_ones_are_written(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given six events of one audit (one partition), and a store whose writes are held
    events = [started("w", at(0))]
    events += [progressed("w", at(i), pages_crawled=i) for i in range(1, 6)]
    await append(pipeline.log, pipeline.topics.lifecycle, events)
    store = GatedStore(pipeline, monkeypatch)

    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        projector.max_records = projector.part_size = 2
        projector.poll_timeout = 0.05
        try:
            # when the projector handles a first batch of two
            first = eventually(projector.step, until=bool, message="a batch")
            handled = await asyncio.wait_for(first, 10)  # not waiting for its write

            # then the step is over while that batch's write is still going on
            await eventually(lambda: store.started, message="the first write")
            assert handled == 2 and store.started == [[0, 1]] and store.done == []
            # and the next step takes the next batch, whose write (of the same partition)
            # waits for the first one's to end before it starts
            assert await asyncio.wait_for(projector.step(), 10) == 2
            await asyncio.sleep(0.1)
            assert store.started == [[0, 1]]
            # and with two batches being written, the next step waits for the first write
            third = asyncio.create_task(projector.step())
            await asyncio.sleep(0.2)
            assert not third.done() and store.started == [[0, 1]]
        finally:
            store.gate.set()  # (stopping waits for the writes)
        assert await third == 2
        await run_until_idle(projector)

    # and the batches were written in order, each once, with nothing left out
    assert store.done == [[0, 1], [2, 3], [4, 5]]
    assert projector.applied == 6
    assert [h.event for h in await pipeline.store.audits.history("w")] == events
    assert same_row(await pipeline.store.audits.get("w"), pure_fold(events)["w"])


@pytest.mark.parametrize("how", ["stop", "revocation"])
async def test_partitions_change_hands_and_the_projector_stops_only_after_the_write_in_flight(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    # given a batch whose write is held, and the batch's step over
    topic = pipeline.topics.lifecycle
    events = [started("r", at(0)), progressed("r", at(1), pages_crawled=1)]
    await append(pipeline.log, topic, events)
    store = GatedStore(pipeline, monkeypatch)
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        projector.poll_timeout = 0.05
        try:
            first = eventually(projector.step, until=bool, message="a batch")
            await asyncio.wait_for(first, 10)
            await eventually(lambda: store.started, message="the write")
            consumer = projector.consumer
            assert consumer is not None and not store.done

            # when it stops, or its partitions are revoked
            if how == "stop":
                ending = asyncio.create_task(projector.stop())
            else:
                partitions = sorted(consumer.assignment())
                ending = asyncio.create_task(projector._revoked(consumer, partitions))

            # then that waits for the write …
            await asyncio.sleep(0.2)
            assert not ending.done()
        finally:
            store.gate.set()
        await ending
        # … whose rows and offsets are in the store once it is over
        assert store.done and projector.applied == 2
        stored = await pipeline.store.writer.stored_offsets(projector.group)
        ends = await pipeline.log.inspection.end_offsets(topic)
        assert {p: stored.get((topic, p), 0) for p in ends} == ends
        assert [h.event for h in await pipeline.store.audits.history("r")] == events


async def test_writes_never_overlap_over_one_partition_and_store_its_offsets_in_order(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given twelve audits of four events over the log's partitions, and a slow store
    topic = pipeline.topics.lifecycle
    events = [started(f"o-{i}", at(i)) for i in range(12)]
    events += [
        progressed(f"o-{i}", at(20 + n), pages_crawled=n) for n in range(3) for i in range(12)
    ]
    await append(pipeline.log, topic, events)
    writes = OverlappingWrites(pipeline.store.writer.apply)
    monkeypatch.setattr(pipeline.store.writer, "apply", writes)

    # when a projector writing parts of three events has caught up
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        projector.part_size = 3
        await run_until_idle(projector)

    # then no two writes under way were over one partition, and each partition's offsets were
    # stored in order
    writes.assert_one_write_a_partition_in_order()
    # and each event is applied exactly once
    await assert_applied_once(pipeline, events)
    assert projector.applied == len(events)


@pytest.mark.parametrize("backend", [BACKEND_PAIRS[1]], indirect=True)
async def test_a_part_over_other_partitions_is_written_while_the_one_before_is(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a batch of two events of one partition, two of another, and two more of the first,
    # and a store whose writes are held
    topic = pipeline.topics.lifecycle
    events = [started(f"g-{i}", at(i)) for i in range(12)]
    await append(pipeline.log, topic, events)
    by_partition: dict[int, list[Any]] = {}
    for record in await read_topic(pipeline.log, topic):
        by_partition.setdefault(record.partition, []).append(record)
    first, other = sorted(by_partition.values(), key=len, reverse=True)[:2]
    assert len(first) >= 4 and len(other) >= 2
    batch = first[:2] + other[:2] + first[2:4]
    store = GatedStore(pipeline, monkeypatch)

    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        projector.part_size, projector.poll_timeout = 2, 0.05
        try:
            # when the projector handles it in parts of two
            handling = asyncio.create_task(projector._handle(batch))

            # then the second part's write starts while the first one's is under way, and the
            # third (over the first's partition) waits for the first to end
            await eventually(lambda: len(store.started) == 2, message="two writes")
            await asyncio.sleep(0.1)
            assert len(store.started) == 2 and not handling.done()
            assert {offsets[0] for offsets in store.started} == {0}
        finally:
            store.gate.set()
        assert await handling == 6
        await run_until_idle(projector)

    # and the first partition's second write started last; each event was applied once
    assert store.started[:3] == [[0, 1], [0, 1], [2, 3]]
    await assert_applied_once(pipeline, events)


async def test_a_write_waiting_for_one_that_fails_is_never_made_and_nothing_is_lost(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given one audit's six events (one partition), and a store whose first write fails when
    # the test lets it
    topic = pipeline.topics.lifecycle
    events = [started("f", at(0))]
    events += [progressed("f", at(i), pages_crawled=i) for i in range(1, 6)]
    await append(pipeline.log, topic, events)
    real_apply = pipeline.store.writer.apply
    fail = asyncio.Event()
    calls: list[list[int]] = []

    async def apply(batch: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append([position[2] for _, position in batch])
        if len(calls) == 1:
            await fail.wait()
            raise StoreError("connection reset", retriable=True)
        return await real_apply(batch, *args, **kwargs)

    monkeypatch.setattr(pipeline.store.writer, "apply", apply)

    # when a projector taking two events a step has handled two batches (the second one's
    # write waiting for the first's), and then the first write fails
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        projector.max_records = projector.part_size = 2
        projector.poll_timeout = 0.05
        for _ in range(2):
            await asyncio.wait_for(eventually(projector.step, until=bool, message="a batch"), 10)
        fail.set()
        with pytest.raises(StoreError):
            await asyncio.wait_for(step_until_it_fails(projector), 10)

    # then the write that waited was never made
    assert calls == [[0, 1]]
    # and a projector that resumes applies each event exactly once
    monkeypatch.setattr(pipeline.store.writer, "apply", real_apply)
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        await run_until_idle(projector)
    await assert_applied_once(pipeline, events)


def test_a_part_splits_into_lanes_of_whole_partitions_of_about_equal_size() -> None:
    # given a part's events over five partitions (one with nothing decodable left)
    sizes = {("t", 0): 7, ("t", 1): 1, ("t", 2): 4, ("t", 3): 4, ("t", 4): 0}

    # when it is split into two lanes
    lanes = split_lanes(sizes, 2)

    # then each partition is in exactly one lane …
    assert len(lanes) == 2
    assert sorted(tp for lane in lanes for tp in lane) == sorted(sizes)
    # … and the lanes are as even as whole partitions allow (7 + 1 against 4 + 4)
    assert sorted(sum(sizes[tp] for tp in lane) for lane in lanes) == [8, 8]
    # and one lane, or one partition, is the part as it is
    assert split_lanes(sizes, 1) == [sorted(sizes, key=sizes.__getitem__, reverse=True)]
    assert split_lanes({("t", 0): 7}, 2) == [[("t", 0)]]


@pytest.mark.parametrize("backend", [BACKEND_PAIRS[1]], indirect=True)
async def test_lanes_are_written_at_once_and_a_failed_lane_loses_nothing(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given audits spread over the log's partitions, and a store whose write fails once for
    # the lane holding the first audit's partition (the others commit)
    topic = pipeline.topics.lifecycle
    events = [started(f"l-{i}", at(i)) for i in range(12)]
    events += [progressed(f"l-{i}", at(20 + i), pages_crawled=i) for i in range(12)]
    await append(pipeline.log, topic, events)
    real_apply = pipeline.store.writer.apply
    calls: list[set[int]] = []
    writing = most = 0
    failed: list[int] = []

    async def apply(batch: Any, offsets: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal writing, most
        partitions = {p for _, p in offsets}
        calls.append(partitions)
        writing += 1
        most = max(most, writing)
        try:
            await asyncio.sleep(0.05)  # both lanes are under way before either ends
            if not failed and any(event.audit_id == "l-0" for event, _ in batch):
                failed.append(min(partitions))
                raise StoreError("connection reset", retriable=True)
            return await real_apply(batch, offsets, *args, **kwargs)
        finally:
            writing -= 1

    monkeypatch.setattr(pipeline.store.writer, "apply", apply)

    # when a projector with two lanes fails, and another resumes
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        projector.lanes = 2
        with pytest.raises(StoreError):
            await asyncio.wait_for(step_until_it_fails(projector), 10)
    group = pipeline.topics.group(Projector.name)
    committed = await pipeline.store.writer.stored_offsets(group)
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        projector.lanes = 2
        await run_until_idle(projector)

    # then the lanes of a part were written at once, over partitions of their own
    assert most == 2
    assert len(calls[0] & calls[1]) == 0 and len(calls[0] | calls[1]) > 1
    # and the lane that did not fail had kept its partitions' offsets
    assert {p for (_, p), n in committed.items() if n} and failed
    assert not {p for (_, p), n in committed.items() if n} & {failed[0]}
    # and in the end each event is applied exactly once
    await assert_applied_once(pipeline, events)


@pytest.mark.parametrize("seed", range(4))
async def test_any_interleaving_applies_each_keys_first_content_once_and_dead_letters_conflicts(
    pipeline: Pipeline, seed: int
) -> None:
    # given interleavings of two audits' events under three shared event ids (starts, steps,
    # completions, each repeated with another time and producer, or given other content),
    # appended in a few runs, the projector catching up after each
    rng = random.Random(seed)
    topic = pipeline.topics.lifecycle
    events = [
        event_of(
            rng.choice(AUDITS),
            rng.randrange(len(IDS)),
            rng.randrange(4),
            rng.randrange(60),
            rng.choice(PRODUCERS),
        )
        for _ in range(30)
    ]
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        for start in range(0, len(events), 10):
            await append(pipeline.log, topic, events[start : start + 10])
            await run_until_idle(projector)

    # then each key's first content is applied once, in order, and nothing else
    applied, conflicts = expected_of(events)
    await assert_applied_once(pipeline, applied)
    # and every conflict is a dead letter naming the reason, the id and the audit, once
    letters = [
        json.loads(r.value) for r in await read_topic(pipeline.log, pipeline.topics.dead_letter)
    ]
    records = {
        (r.partition, r.offset): json.loads(r.value) for r in await read_topic(pipeline.log, topic)
    }
    refused = sorted(
        (body["audit_id"], body["event_id"], body["type"], json.dumps(body["data"], sort_keys=True))
        for body in (records[(d["source_partition"], d["source_offset"])] for d in letters)
    )
    assert refused == sorted(
        (
            e.audit_id,
            str(e.event_id),
            e.type,
            json.dumps(e.data.model_dump(mode="json"), sort_keys=True),
        )
        for i, e in enumerate(events)
        if i in conflicts
    )
    for letter in letters:
        assert letter["error"].startswith("event_id_conflict: ")
        assert letter["consumer"] == pipeline.topics.group(Projector.name)
    assert projector.dead_lettered == len(conflicts)
