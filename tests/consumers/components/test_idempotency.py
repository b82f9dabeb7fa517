"""Every consumer judges the key ``(audit_id, event_id)`` alike, on each backend pair: over
any interleaving of duplicates and conflicts, the reconciler's states are the projection's
rows, both folded from each key's first content once."""

from __future__ import annotations

import json
import random

import pytest

from consumers.components.projector import Projector
from consumers.components.reconciler import Reconciler
from statemachine.policy import Policy
from tests.contracts.projection_store import at, completed, observed, progressed, pure_fold, started
from tests.interleavings import AUDITS, IDS, PRODUCERS, event_of, expected_of
from tests.pipeline import Pipeline, append, read_topic, run_until_idle


@pytest.mark.parametrize("seed", range(3))
async def test_the_reconciler_folds_what_the_projector_applies(
    pipeline: Pipeline, seed: int
) -> None:
    # given an interleaving of two audits' events under shared ids, appended in runs
    rng = random.Random(seed)
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

    # when the projector and the reconciler consume them
    async with (
        Projector(pipeline.log, pipeline.store.writer) as projector,
        Reconciler(pipeline.log, Policy()) as reconciler,
    ):
        for start in range(0, len(events), 10):
            await append(pipeline.log, pipeline.topics.lifecycle, events[start : start + 10])
            await run_until_idle(projector, reconciler)

        # then both folded each key's first content once: the same state for every audit
        applied, _ = expected_of(events)
        for audit_id, expected in pure_fold(applied).items():
            row = await pipeline.store.audits.get(audit_id)
            assert row is not None and row.state == expected.state
            state = reconciler.state(audit_id)
            if expected.status == "running":
                assert state == expected.state
            else:
                assert state is not None and state.status == expected.status


async def test_a_conflict_after_a_reconciler_failure_is_no_overturn(pipeline: Pipeline) -> None:
    # given a running audit the reconciler failed: its instance errored
    start = started("a-1", at(0))
    step = progressed("a-1", at(1), pages_crawled=3)
    lifecycle = pipeline.topics.lifecycle
    await append(pipeline.log, lifecycle, [start, step, observed("a-1", "errored", at(2))])
    async with (
        Projector(pipeline.log, pipeline.store.writer) as projector,
        Reconciler(pipeline.log, Policy()) as reconciler,
    ):
        await run_until_idle(projector, reconciler)
        await run_until_idle(projector, reconciler)
        state = reconciler.state("a-1")
        assert state is not None and (state.status, state.failed_by) == ("failed", "reconciler")

        # when a completion comes under the id of an event folded before the failure
        conflict = completed("a-1", at(3)).model_copy(update={"event_id": step.event_id})
        await append(pipeline.log, lifecycle, [conflict])
        await run_until_idle(projector, reconciler)

        # then the projector dead-letters it and the reconciler passes it over: still failed
        [letter] = [
            json.loads(r.value) for r in await read_topic(pipeline.log, pipeline.topics.dead_letter)
        ]
        assert letter["error"].startswith("event_id_conflict: ")
        row = await pipeline.store.audits.get("a-1")
        assert row is not None and row.state.status == "failed"
        state = reconciler.state("a-1")
        assert state is not None and (state.status, state.failed_by) == ("failed", "reconciler")

    # and so does a reconciler that rebuilds the partition from the log
    async with Reconciler(pipeline.log, Policy()) as rebuilt:
        await run_until_idle(rebuilt)
        state = rebuilt.state("a-1")
        assert state is not None and (state.status, state.failed_by) == ("failed", "reconciler")

        # while a completion of its own overturns the failure everywhere, and the keys go
        async with Projector(pipeline.log, pipeline.store.writer) as projector:
            await append(pipeline.log, lifecycle, [completed("a-1", at(4))])
            await run_until_idle(projector, rebuilt)
            row = await pipeline.store.audits.get("a-1")
            assert row is not None and row.state.status == "completed"
            state = rebuilt.state("a-1")
            assert state is not None and state.status == "completed"
            assert all("a-1" not in keys for keys in rebuilt.keys.values())
