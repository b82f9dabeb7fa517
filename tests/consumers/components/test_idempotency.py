"""Every consumer judges the key ``(audit_id, event_id)`` alike, on each backend pair: over
any interleaving of duplicates and conflicts, the reconciler's states are the projection's
rows, both folded from each key's first content once."""

from __future__ import annotations

import random

import pytest

from consumers.components.projector import Projector
from consumers.components.reconciler import Reconciler
from statemachine.policy import Policy
from tests.contracts.projection_store import pure_fold
from tests.interleavings import AUDITS, IDS, PRODUCERS, event_of, expected_of
from tests.pipeline import Pipeline, append, run_until_idle


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
