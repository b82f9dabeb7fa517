"""wait_for_projection on each backend pair: a read waits until the projection has applied what
the log held when it asked, and no longer than it may."""

from __future__ import annotations

import asyncio
import time

from consumers.components.projector import Projector
from consumers.components.reconciler import Reconciler
from consumers.operations.freshness import Freshness, wait_for_projection
from statemachine.policy import Policy
from tests.contracts.projection_store import at, observed, progressed, started
from tests.pipeline import Pipeline, append, run_until_idle


async def test_a_caught_up_projection_is_fresh_at_once(pipeline: Pipeline) -> None:
    # given events the projector has applied
    await append(pipeline.log, pipeline.topics.lifecycle, [started("a-1"), progressed("a-1")])
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        await run_until_idle(projector)

    # then the projection is fresh without any wait
    assert await wait_for_projection(pipeline.log, pipeline.store, timeout=0) is True


async def test_a_projection_behind_the_log_is_not_fresh_after_the_timeout(
    pipeline: Pipeline,
) -> None:
    # given events no projector has applied
    await append(pipeline.log, pipeline.topics.lifecycle, [started("a-1"), started("a-2")])

    # when a read waits for them for 0.3 s
    began = time.monotonic()
    fresh = await wait_for_projection(pipeline.log, pipeline.store, timeout=0.3)

    # then it gives up, after that long
    assert fresh is False
    assert time.monotonic() - began >= 0.3


async def test_a_read_waits_for_the_projector_to_catch_up(pipeline: Pipeline) -> None:
    # given events not yet applied, and a read waiting for them
    await append(pipeline.log, pipeline.topics.lifecycle, [started("a-1"), progressed("a-1")])
    waiting = asyncio.create_task(wait_for_projection(pipeline.log, pipeline.store, timeout=60))

    # when the projector catches up
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        await run_until_idle(projector)

    # then the read goes on, with the rows in place
    assert await asyncio.wait_for(waiting, 30) is True
    row = await pipeline.store.audits.get("a-1")
    assert row is not None and row.version == 2


async def test_transaction_markers_after_the_last_record_are_not_waited_for(
    pipeline: Pipeline,
) -> None:
    # given a decision the reconciler wrote in a transaction (on Kafka its commit marker takes
    # an offset after the record), all of it projected
    events = [
        started("a-1", at(0)),
        observed("a-1", "errored", at(30), error={"name": "E", "message": "x"}),
    ]
    await append(pipeline.log, pipeline.topics.lifecycle, events)
    async with (
        Reconciler(pipeline.log, Policy()) as reconciler,
        Projector(pipeline.log, pipeline.store.writer) as projector,
    ):
        await run_until_idle(reconciler, projector)
    row = await pipeline.store.audits.get("a-1")
    assert row is not None and row.status == "failed"
    topic = pipeline.topics.lifecycle
    ends = await pipeline.log.inspection.end_offsets(topic)
    stored = await pipeline.store.writer.stored_offsets(pipeline.topics.group(Projector.name))
    gap = sum(ends.values()) - sum(stored.get((topic, p), 0) for p in ends)
    assert gap == (1 if pipeline.backend.name == "kafka+postgres" else 0)

    # then the projection counts as fresh, although the log's end offset may be further
    began = time.monotonic()
    assert await wait_for_projection(pipeline.log, pipeline.store, timeout=5) is True
    assert time.monotonic() - began < 5


async def test_a_gap_of_markers_is_read_once_however_often_it_is_asked_about(
    pipeline: Pipeline,
) -> None:
    # given a projected decision written in a transaction, and a little later one more event
    events = [
        started("a-1", at(0)),
        observed("a-1", "errored", at(30), error={"name": "E", "message": "x"}),
    ]
    await append(pipeline.log, pipeline.topics.lifecycle, events)
    async with (
        Reconciler(pipeline.log, Policy()) as reconciler,
        Projector(pipeline.log, pipeline.store.writer) as projector,
    ):
        await run_until_idle(reconciler, projector)
    freshness = Freshness(pipeline.log, pipeline.store)
    marker = pipeline.backend.name == "kafka+postgres"  # only Kafka has commit markers

    # when the process asks ten times whether the projection is fresh
    answers = [await freshness.wait(timeout=5) for _ in range(10)]

    # then each answer is yes, and the log was read at most once (for the marker)
    assert answers == [True] * 10
    assert freshness.reads == (1 if marker else 0)

    # and when a new record arrives unprojected, that is seen at once (not taken for a marker)
    await append(pipeline.log, pipeline.topics.lifecycle, [started("a-2", at(40))])
    assert await freshness.wait(timeout=0) is False

    # and once projected, the answer is yes again
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        await run_until_idle(projector)
    assert await freshness.wait(timeout=5) is True
