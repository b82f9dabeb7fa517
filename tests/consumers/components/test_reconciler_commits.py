"""The reconciler's commits on each backend pair: a batch is judged while the one before is
committed, a partition's commits are made one at a time and in order, one after a failed one is
never made, a checkpoint holds the states as of its own commit, and the reconciler's own
decisions, read back, are passed over."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from consumers.components.checkpoints import decode_states
from consumers.components.reconciler import Reconciler
from statemachine.errors import EventLogError
from statemachine.events import AuditEvent, AuditFailed
from statemachine.policy import Policy
from statemachine.state import AuditState
from tests.contracts.projection_store import at, failed, observed, progressed, started
from tests.eventually import eventually
from tests.pipeline import Pipeline, append, lifecycle_events, run_until_idle

POLICY = Policy()


def one_audit(audit_id: str) -> list[AuditEvent]:
    """An audit's events (one partition): it runs, progresses, and its instance dies."""
    return [
        started(audit_id, at(0), instance=f"wf-{audit_id}"),
        progressed(audit_id, at(1), pages_crawled=1),
        progressed(audit_id, at(2), pages_crawled=2),
        observed(audit_id, "errored", at(30), instance=f"wf-{audit_id}", error="oom"),
        progressed(audit_id, at(31), pages_crawled=3),
        observed(audit_id, "errored", at(40), instance=f"wf-{audit_id}", error="oom"),
    ]


def reconciler_decisions(events: list[AuditEvent]) -> Counter[str]:
    return Counter(
        e.audit_id
        for e in events
        if isinstance(e, AuditFailed) and e.data.failed_by.value == "reconciler"
    )


class HeldCommits:
    """The consumer's ``commit``, each call recorded (partition → offset, in call order) and
    call number ``hold`` held until :attr:`release` is set; it then fails when ``fail`` is."""

    def __init__(self, commit: Any, *, hold: int = 1, fail: bool = False) -> None:
        self.real_commit, self.hold, self.fail = commit, hold, fail
        self.release = asyncio.Event()
        self.calls: list[dict[tuple[str, int], int]] = []
        self.under_way: set[tuple[str, int]] = set()
        self.overlapped = False  # two commits over one partition under way at once

    async def __call__(self, offsets: dict[tuple[str, int], int], outputs: Any = ()) -> None:
        self.calls.append(dict(offsets))
        self.overlapped |= bool(self.under_way & set(offsets))
        self.under_way |= set(offsets)
        try:
            if len(self.calls) == self.hold:
                await self.release.wait()
                if self.fail:
                    raise EventLogError("connection reset", retriable=True)
            await self.real_commit(offsets, outputs)
        finally:
            self.under_way -= set(offsets)


def holding_commits(reconciler: Reconciler, *, hold: int = 1, fail: bool = False) -> HeldCommits:
    """Have ``reconciler`` read two records at a time, its commits made through a
    :class:`HeldCommits`."""
    reconciler.max_records = 2
    reconciler.poll_timeout = 0.05
    assert reconciler.consumer is not None
    held = HeldCommits(reconciler.consumer.commit, hold=hold, fail=fail)
    reconciler.consumer.commit = held  # type: ignore[method-assign]
    return held


def read_from(reconciler: Reconciler) -> tuple[str, int]:
    """The one partition the reconciler has read records of."""
    (tp,) = (tp for tp, position in reconciler.positions.items() if position > 0)
    return tp


async def a_batch(reconciler: Reconciler) -> int:
    return await asyncio.wait_for(eventually(reconciler.step, until=bool, message="a batch"), 10)


async def test_a_batch_is_judged_while_the_one_before_is_committed_and_commits_keep_order(
    pipeline: Pipeline,
) -> None:
    # given an audit's six events, read two at a time, and commits the test holds from the
    # second batch on
    await append(pipeline.log, pipeline.topics.lifecycle, one_audit("d"))
    async with Reconciler(pipeline.log, POLICY) as reconciler:
        held = holding_commits(reconciler, hold=2)
        assert await a_batch(reconciler) == 2
        tp = read_from(reconciler)
        first = reconciler.positions[tp]

        # when the first held batch's commit is under way and the next batch is stepped
        await a_batch(reconciler)  # its commit starts and is held
        step = asyncio.create_task(a_batch(reconciler))

        # then the next batch is judged meanwhile (the dead audit decided) …
        await eventually(
            lambda: reconciler.positions[tp] == first + 4, timeout=10, message="judged"
        )
        assert reconciler.decided == 1
        # … but its commit waits for the one before it over the partition
        assert held.calls == [{tp: first}, {tp: first + 2}]
        assert not step.done()

        # and once that one is made, the rest follow in order, one at a time
        held.release.set()
        await asyncio.wait_for(step, 10)
        await run_until_idle(reconciler)
        assert [c[tp] for c in held.calls][:3] == [first, first + 2, first + 4]
        offsets = [c[tp] for c in held.calls]
        assert offsets == sorted(offsets) and not held.overlapped

    # and the dead audit is failed exactly once
    assert reconciler_decisions(await lifecycle_events(pipeline.log, at_least=7)) == {"d": 1}


async def test_a_commit_after_one_that_failed_over_its_partition_is_never_made(
    pipeline: Pipeline,
) -> None:
    # given an audit's six events, read two at a time, and a first commit that fails
    await append(pipeline.log, pipeline.topics.lifecycle, one_audit("d"))
    async with Reconciler(pipeline.log, POLICY) as reconciler:
        held = holding_commits(reconciler, fail=True)

        # when the second batch (the deadly observation) is judged while the first batch's
        # commit is under way, and that commit then fails
        await a_batch(reconciler)
        step = asyncio.create_task(a_batch(reconciler))
        await eventually(lambda: reconciler.decided == 1, timeout=10, message="decided")
        held.release.set()

        # then the step fails, and the second batch's commit (with the decision) is never made
        with pytest.raises(EventLogError):
            await asyncio.wait_for(step, 10)
    assert len(held.calls) == 1

    # and a reconciler that resumes, as the supervisor restarts one, decides exactly once
    async with Reconciler(pipeline.log, POLICY) as again:
        await run_until_idle(again)
    assert reconciler_decisions(await lifecycle_events(pipeline.log, at_least=7)) == {"d": 1}


async def test_a_checkpoint_holds_the_states_as_of_its_commit_while_the_next_batch_is_judged(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given an audit's six events, read two at a time, a checkpoint due after every batch,
    # and the checkpoints saved recorded
    await append(pipeline.log, pipeline.topics.lifecycle, one_audit("d"))
    saved: list[tuple[int, dict[str, AuditState]]] = []
    real_save = pipeline.store.checkpoints.save_checkpoint

    async def save(consumer: str, topic: str, partition: int, offset: int, blob: bytes) -> None:
        saved.append((offset, decode_states(blob)[0]))
        await real_save(consumer, topic, partition, offset, blob)

    monkeypatch.setattr(pipeline.store.checkpoints, "save_checkpoint", save)
    async with Reconciler(
        pipeline.log, POLICY, checkpoints=pipeline.store.checkpoints
    ) as reconciler:
        assert reconciler.checkpoints is not None
        reconciler.checkpoints.every_events = 1
        held = holding_commits(reconciler)

        # when the first batch's commit is held while the second batch (two more pages)
        # is judged, and then let through
        await a_batch(reconciler)
        tp = read_from(reconciler)
        first = reconciler.positions[tp] - 2
        step = asyncio.create_task(a_batch(reconciler))
        await eventually(lambda: reconciler.positions[tp] == first + 4, timeout=10, message="b")
        held.release.set()
        await asyncio.wait_for(step, 10)
        await run_until_idle(reconciler)
        await reconciler.checkpoints.flush()

    # then the checkpoint of the first commit holds the audit as the first batch left it
    # (running, one page), not as the batch judged meanwhile did (failed); the later ones, failed
    states_at = dict(saved)
    assert states_at[first + 2]["d"].status == "running"
    assert states_at[first + 2]["d"].pages_crawled == 1
    assert [s["d"].status for o, s in saved if o > first + 2] == ["failed"] * (len(saved) - 1)


async def test_its_own_decisions_read_back_are_passed_over_and_others_are_judged(
    pipeline: Pipeline,
) -> None:
    # given a dead audit, and a failure that says the reconciler made it but another service
    # published
    judged: list[tuple[str, str]] = []

    class Recording(Reconciler):
        def _judge(self, states: Any, holds: Any, event: AuditEvent, brake: bool = False) -> Any:
            judged.append((event.type, event.audit_id))
            return super()._judge(states, holds, event, brake)

    topic = pipeline.topics.lifecycle
    await append(pipeline.log, topic, one_audit("d")[:4])

    # when the reconciler decides, reads its decision back, and then the other failure
    async with Recording(pipeline.log, POLICY) as reconciler:
        await run_until_idle(reconciler)
        assert reconciler.decided == 1
        assert not any(reconciler.made.values())  # read back
        await append(pipeline.log, topic, [failed("d", at(50), by="reconciler", code="oom")])
        await run_until_idle(reconciler)
        live = reconciler.state("d")

    # then its own decision was not judged again; the one published elsewhere was
    assert judged == [("WorkflowStatusObserved", "d"), ("AuditFailed", "d")]
    # and its state is as one rebuilt from the log, which folds every event, makes it
    async with Reconciler(pipeline.log, POLICY) as rebuilt:
        await run_until_idle(rebuilt)
        assert rebuilt.state("d") == live
    assert reconciler_decisions(await lifecycle_events(pipeline.log, at_least=6)) == {"d": 2}
