"""Rebuilding the projection on each backend pair: the log is read while the projection is
emptied, a failure to empty it stops the rebuild before anything is written, and chunks of
different partitions are written at once, never two of one partition."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from consumers.components.projector import Projector
from consumers.operations import rebuild
from consumers.operations.rebuild import rebuild_projection
from statemachine.errors import StoreError
from statemachine.events import AuditEvent
from tests.contracts.projection_store import at, completed, observed, progressed, started
from tests.interleavings import AUDITS, IDS, PRODUCERS, event_of, expected_of
from tests.pipeline import OverlappingWrites, Pipeline, append, backends_of, run_until_idle


async def projected(pipeline: Pipeline) -> dict[str, dict[str, Any]]:
    events: list[AuditEvent] = []
    for i in range(20):
        events += [
            started(f"a{i}", at(0), instance=f"wf-a{i}"),
            progressed(f"a{i}", at(1), current_phase="crawl", pages_crawled=i),
        ]
    events += [completed("a0", at(5)), observed("a1", "running", at(6), instance="wf-a1")]
    await append(pipeline.log, pipeline.topics.lifecycle, events)
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        await run_until_idle(projector)
    return {r.audit_id: r.values() for r in await pipeline.store.audits.list_audits(limit=100)}


def without_update_times(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {a: {k: v for k, v in r.items() if k != "updated_at"} for a, r in rows.items()}


async def test_a_rebuild_reads_the_log_while_the_projection_is_emptied(
    pipeline: Pipeline,
) -> None:
    # given a projected table, and a store that is slow to empty
    before = await projected(pipeline)
    backends = backends_of(pipeline)
    read_while_emptying = []
    reset, read = backends.store.writer.reset, backends.log.inspection.read

    async def slow_reset(consumer: str) -> None:
        await asyncio.sleep(0.3)
        read_while_emptying.append(bool(reading))
        await reset(consumer)

    reading: list[int] = []

    async def counted_read(*args: Any, **kwargs: Any) -> Any:
        reading.append(args[1])
        async for batch in read(*args, **kwargs):
            yield batch

    backends.store.writer.reset = slow_reset  # type: ignore[method-assign]
    backends.log.inspection.read = counted_read  # type: ignore[method-assign]

    # when the table is rebuilt
    applied = await rebuild_projection(backends)

    # then the log was being read before the store was empty, and the table is as it was
    assert read_while_emptying == [True]
    assert applied == 42
    after = {r.audit_id: r.values() for r in await pipeline.store.audits.list_audits(limit=100)}
    assert without_update_times(after) == without_update_times(before)


async def test_a_rebuild_whose_store_cannot_be_emptied_stops_and_changes_nothing(
    pipeline: Pipeline,
) -> None:
    # given a projected table, and a store that refuses to be emptied after a while
    before = await projected(pipeline)
    backends = backends_of(pipeline)

    async def failing_reset(consumer: str) -> None:
        await asyncio.sleep(0.2)
        raise StoreError("the store is down")

    backends.store.writer.reset = failing_reset  # type: ignore[method-assign]
    tasks = asyncio.all_tasks()

    # when the table is rebuilt, the store's error is the rebuild's
    with pytest.raises(StoreError, match="the store is down"):
        await rebuild_projection(backends)

    # then the log is no longer read (no task of the rebuild's is left), and the table is as
    # it was
    left = [t for t in asyncio.all_tasks() - tasks if not t.done()]
    assert not [t for t in left if "rebuild" in t.get_coro().__qualname__], left
    after = {r.audit_id: r.values() for r in await pipeline.store.audits.list_audits(limit=100)}
    assert after == before


async def test_a_rebuild_writes_chunks_of_different_partitions_at_once_never_of_one(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a projected table, chunks of 5 events (several a partition), a slow store
    before = await projected(pipeline)
    backends = backends_of(pipeline)
    monkeypatch.setattr(rebuild, "CHUNK", 5)
    writes = OverlappingWrites(backends.store.writer.apply)
    backends.store.writer.apply = writes  # type: ignore[method-assign]

    # when the table is rebuilt
    applied = await rebuild_projection(backends)

    # then (with more than one partition) two writes were under way at once, never two of one
    # partition, at most WRITERS, each partition's chunks in order, and the table is as it was
    partitions = len(await backends.log.inspection.end_offsets(backends.topics.lifecycle))
    assert writes.most_at_once() == min(partitions, rebuild.WRITERS)
    writes.assert_one_write_a_partition_in_order()
    assert applied == 42
    after = {r.audit_id: r.values() for r in await pipeline.store.audits.list_audits(limit=100)}
    assert without_update_times(after) == without_update_times(before)


async def test_a_rebuild_whose_write_fails_stops_with_its_error_and_leaves_no_task(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    await projected(pipeline)
    backends = backends_of(pipeline)
    monkeypatch.setattr(rebuild, "CHUNK", 5)
    apply = backends.store.writer.apply
    calls = 0

    async def failing_apply(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise StoreError("the store is down")
        await asyncio.sleep(0.02)
        return await apply(*args, **kwargs)

    backends.store.writer.apply = failing_apply  # type: ignore[method-assign]
    tasks = asyncio.all_tasks()
    with pytest.raises(StoreError, match="the store is down"):
        await rebuild_projection(backends)
    left = [t for t in asyncio.all_tasks() - tasks if not t.done()]
    assert not [t for t in left if "rebuild" in t.get_coro().__qualname__], left
    assert not [t for t in left if "apply" in t.get_coro().__qualname__], left


async def test_a_rebuild_over_duplicates_and_conflicts_gives_the_same_table(
    pipeline: Pipeline,
) -> None:
    # given a table projected from interleavings of duplicates and conflicts
    rng = random.Random(7)
    events = [
        event_of(
            rng.choice(AUDITS),
            rng.randrange(len(IDS)),
            rng.randrange(4),
            rng.randrange(60),
            rng.choice(PRODUCERS),
        )
        for _ in range(40)
    ]
    applied, conflicts = expected_of(events)
    assert conflicts  # (the seed gives some)
    await append(pipeline.log, pipeline.topics.lifecycle, events)
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        await run_until_idle(projector)
    rows = {r.audit_id: r.values() for r in await pipeline.store.audits.list_audits(limit=100)}
    histories = {a: await pipeline.store.audits.history(a) for a in AUDITS}

    # when the table is rebuilt from the log
    assert await rebuild_projection(backends_of(pipeline)) == len(applied)

    # then it is the same: rows, and each audit's history of first contents
    after = {r.audit_id: r.values() for r in await pipeline.store.audits.list_audits(limit=100)}
    assert without_update_times(after) == without_update_times(rows)
    for audit_id in AUDITS:
        again = await pipeline.store.audits.history(audit_id)
        assert [h.event for h in again] == [h.event for h in histories[audit_id]]
        assert [h.event for h in again] == [e for e in applied if e.audit_id == audit_id]
