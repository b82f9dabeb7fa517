"""Checkpoints of the reconciler on each backend pair: an assignment folds only what follows the
latest checkpoint, decides exactly as a reconciler that folded everything, and a crash between
a decision and the next checkpoint loses nothing and decides nothing twice."""

from __future__ import annotations

import pickle
import zlib
from collections import Counter

import pytest

from consumers.components.checkpoints import (
    FORMAT,
    Checkpoints,
    decode_checkpoint,
    decode_states,
    encode_states,
)
from consumers.components.reconciler import Reconciler
from statemachine.events import AuditEvent, AuditFailed, AuditFailureHeld
from statemachine.policy import Policy
from statemachine.state import AuditState
from tests.contracts.projection_store import at, completed, held, observed, started
from tests.pipeline import Pipeline, append, lifecycle_events, run_until_idle

POLICY = Policy()


def dead(audit_id: str, minutes: float) -> list[AuditEvent]:
    return [
        started(audit_id, at(0), instance=f"wf-{audit_id}"),
        observed(
            audit_id,
            "errored",
            at(minutes),
            instance=f"wf-{audit_id}",
            error="Worker exceeded memory limit",
        ),
    ]


def decisions(events: list[AuditEvent]) -> Counter[str]:
    return Counter(
        e.audit_id
        for e in events
        if isinstance(e, AuditFailed) and e.data.failed_by.value == "reconciler"
    )


def reconciler(pipeline: Pipeline, every_events: int) -> Reconciler:
    component = Reconciler(pipeline.log, POLICY, checkpoints=pipeline.store.checkpoints)
    assert component.checkpoints is not None
    component.checkpoints.every_events = every_events
    return component


def test_states_and_holds_survive_encoding_and_another_format_is_refused() -> None:
    state = AuditState(audit_id="a-1", status="running", started_at=at(0), pages_total=3)
    hold = held("a-1", at(5))
    states, holds = decode_states(encode_states({"a-1": state}, {"a-1": hold}))
    assert states == {"a-1": state}
    assert holds == {"a-1": hold}
    # terminal audits kept compact (no id of their own) come back shared, as the reconciler
    # keeps them
    done = AuditState(audit_id="", status="failed", failed_by="reconciler")
    states, _ = decode_states(encode_states({"t-1": done, "t-2": done}))
    assert states["t-1"] == done and states["t-1"] is states["t-2"]
    with pytest.raises(ValueError, match="unreadable"):
        decode_states(b"not a checkpoint")


async def test_an_assignment_folds_only_what_follows_the_checkpoint_and_decides_the_same(
    pipeline: Pipeline,
) -> None:
    # given 20 dead audits reconciled, with a checkpoint after every batch
    await append(
        pipeline.log, pipeline.topics.lifecycle, [e for i in range(20) for e in dead(f"d{i}", 30)]
    )
    async with reconciler(pipeline, every_events=1) as first:
        await run_until_idle(first)
        await first.checkpoints.flush()  # type: ignore[union-attr]
        kept = {tp: at for tp, at in first.positions.items() if at > 0}
    assert sum(decisions(await lifecycle_events(pipeline.log, at_least=60)).values()) == 20

    # when more arrives: a second deadly observation of a failed audit, and a new dead audit
    later = [observed("d0", "errored", at(40), instance="wf-d0", error="oom"), *dead("late", 50)]
    await append(pipeline.log, pipeline.topics.lifecycle, later)

    # then a new reconciler starts from the checkpoints (reads only what follows them) …
    async with reconciler(pipeline, every_events=10**9) as second:
        await run_until_idle(second)
        # (it read what follows the checkpoints, not the 60 records before)
        assert 0 < sum(second.read_on_assign.values()) < 60
        for tp, start in kept.items():
            restored = await Checkpoints(pipeline.store.checkpoints, second.group).load(tp, 10**9)
            # (the last batch may have found a save in flight: a checkpoint at most that far)
            assert restored is not None and 0 < restored.next_offset <= start
    # … and decides exactly what one that folded everything would: once per audit
    assert decisions(await lifecycle_events(pipeline.log, at_least=64)) == {
        **{f"d{i}": 1 for i in range(20)},
        "late": 1,
    }


async def test_a_crash_between_decisions_and_the_next_checkpoint_loses_and_doubles_nothing(
    pipeline: Pipeline,
) -> None:
    # given a checkpoint after the first 10 dead audits were decided
    await append(
        pipeline.log, pipeline.topics.lifecycle, [e for i in range(10) for e in dead(f"a{i}", 30)]
    )
    async with reconciler(pipeline, every_events=1) as first:
        await run_until_idle(first)
        await first.checkpoints.flush()  # type: ignore[union-attr]
        # and 10 more decided and committed, with no checkpoint after them (then a crash)
        first.checkpoints.every_events = 10**9  # type: ignore[union-attr]
        first.checkpoints.every_seconds = 10**9  # type: ignore[union-attr]
        await append(
            pipeline.log,
            pipeline.topics.lifecycle,
            [e for i in range(10) for e in dead(f"b{i}", 30)],
        )
        await run_until_idle(first)

    # when every audit is observed dead once more and a restarted reconciler takes over
    again = [
        observed(f"{p}{i}", "errored", at(45), instance=f"wf-{p}{i}", error="oom")
        for p in "ab"
        for i in range(10)
    ]
    await append(pipeline.log, pipeline.topics.lifecycle, again)
    async with reconciler(pipeline, every_events=10**9) as second:
        await run_until_idle(second)

    # then each audit was decided exactly once
    counts = decisions(await lifecycle_events(pipeline.log, at_least=80))
    assert counts == {f"{p}{i}": 1 for p in "ab" for i in range(10)}
    assert not any(isinstance(e, AuditFailureHeld) for e in await lifecycle_events(pipeline.log))


def test_keys_survive_encoding_and_a_checkpoint_saved_before_them_restores_none() -> None:
    state = AuditState(audit_id="a-1", status="running", started_at=at(0))
    keys = {"a-1": bytearray((1).to_bytes(16, "big") + (2**127 + 5).to_bytes(16, "big"))}
    assert decode_checkpoint(encode_states({"a-1": state}, None, keys))[2] == keys
    # a checkpoint of the same format without keys (saved before they were kept)
    _, names, rows, terminal, held_ = pickle.loads(zlib.decompress(encode_states({"a-1": state})))[
        :5
    ]
    older = zlib.compress(pickle.dumps((FORMAT, names, rows, terminal, held_)))
    assert decode_checkpoint(older) == ({"a-1": state}, {}, {})


async def test_a_key_given_other_content_is_passed_over_live_and_after_a_checkpoint(
    pipeline: Pipeline,
) -> None:
    # given two running audits, the second with a checkpoint after its start
    one, two = started("k-1", at(0), instance="wf-k1"), started("k-2", at(0), instance="wf-k2")
    await append(pipeline.log, pipeline.topics.lifecycle, [one, two])
    async with reconciler(pipeline, every_events=1) as first:
        await run_until_idle(first)
        await first.checkpoints.flush()  # type: ignore[union-attr]

        # when the first gets a completion under its start's event id (a conflict the
        # projector dead-letters), then is observed dead
        clash = completed("k-1", at(1)).model_copy(update={"event_id": one.event_id})
        dead_one = observed("k-1", "errored", at(30), instance="wf-k1", error="oom")
        await append(pipeline.log, pipeline.topics.lifecycle, [clash, dead_one])
        await run_until_idle(first)

    # and the second gets the same after a restart from its checkpoint
    clash = completed("k-2", at(1)).model_copy(update={"event_id": two.event_id})
    dead_two = observed("k-2", "errored", at(30), instance="wf-k2", error="oom")
    await append(pipeline.log, pipeline.topics.lifecycle, [clash, dead_two])
    async with reconciler(pipeline, every_events=10**9) as second:
        await run_until_idle(second)
        assert 0 < sum(second.read_on_assign.values()) < 4  # from the checkpoint on

    # then the completions were passed over: both audits ran on and were decided once
    assert decisions(await lifecycle_events(pipeline.log, at_least=8)) == {"k-1": 1, "k-2": 1}
