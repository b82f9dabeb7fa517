"""Retention of the lifecycle log on each backend pair: the log is trimmed only as far as every
consumer that folds it has moved past (the projector's offsets, the reconciler's checkpoints),
and after a trim a restarted reconciler still decides right, and history still explains."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import structlog

from consumers.components.projector import Projector
from consumers.components.reconciler import Reconciler
from consumers.components.retention import Retention
from consumers.components.telemetry import Telemetry
from consumers.operations.rebuild import rebuild_projection
from statemachine.errors import InvalidInput
from statemachine.events import AuditEvent, AuditFailed
from statemachine.policy import Policy
from tests.contracts.projection_store import at, completed, observed, progressed, started
from tests.pipeline import Pipeline, append, backends_of, lifecycle_events, run_until_idle

LATER = datetime.now(UTC) + timedelta(days=30)  # every record is older than the retention


def retention(pipeline: Pipeline) -> Retention:
    topics = pipeline.topics
    return Retention(
        pipeline.log,
        pipeline.store,
        timedelta(days=7),
        projector=topics.group(Projector.name),
        checkpointing=[topics.group(Reconciler.name)],
        once_run=[topics.group(Telemetry.name)],
        clock=lambda: LATER,
    )


def reconciler(pipeline: Pipeline) -> Reconciler:
    component = Reconciler(pipeline.log, Policy(), checkpoints=pipeline.store.checkpoints)
    assert component.checkpoints is not None
    component.checkpoints.every_events = 1
    return component


async def starts(pipeline: Pipeline) -> dict[int, int]:
    return await pipeline.log.inspection.start_offsets(pipeline.topics.lifecycle)


async def test_the_log_is_trimmed_only_past_what_every_consumer_has_kept(
    pipeline: Pipeline,
) -> None:
    # given 30 running audits, projected, and a reconciler that has not run yet
    events: list[AuditEvent] = [started(f"r{i}", at(0), instance=f"wf-r{i}") for i in range(30)]
    await append(pipeline.log, pipeline.topics.lifecycle, events)
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        await run_until_idle(projector)
    before = await starts(pipeline)

    # when retention runs before the reconciler has a checkpoint: nothing is trimmed
    assert await retention(pipeline).trim() == {}
    async with reconciler(pipeline) as first:
        await run_until_idle(first)
        await first.checkpoints.flush()  # type: ignore[union-attr]

    # when it runs once the reconciler's checkpoints cover everything
    trimmed = await retention(pipeline).trim()

    # then every partition that held records is trimmed to the checkpoint (its last record is
    # always kept), and nothing more
    saved = await pipeline.store.checkpoints.checkpoint_offsets(
        pipeline.topics.group(Reconciler.name), pipeline.topics.lifecycle
    )
    assert trimmed == {p: o for p, o in saved.items() if o > before.get(p, 0)}
    assert trimmed
    after = await starts(pipeline)
    ends = await pipeline.log.inspection.end_offsets(pipeline.topics.lifecycle)
    for p, offset in trimmed.items():
        assert after[p] == min(offset, ends[p] - 1)

    # and each audit's history is still whole in the projection
    for i in range(30):
        assert [h.event.type for h in await pipeline.store.audits.history(f"r{i}")] == [
            "AuditStarted"
        ]


async def test_a_reconciler_restarted_after_a_trim_decides_from_its_checkpoint(
    pipeline: Pipeline,
) -> None:
    # given running audits, reconciled and checkpointed, and the log trimmed behind them
    events: list[AuditEvent] = [started(f"r{i}", at(0), instance=f"wf-r{i}") for i in range(30)]
    await append(pipeline.log, pipeline.topics.lifecycle, events)
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        await run_until_idle(projector)
        async with reconciler(pipeline) as first:
            await run_until_idle(first)
            await first.checkpoints.flush()  # type: ignore[union-attr]
        assert await retention(pipeline).trim()

        # when an audit whose start is no longer in the log dies, and a new reconciler runs
        death = observed("r7", "errored", at(30), instance="wf-r7", error="exceeded memory limit")
        await append(pipeline.log, pipeline.topics.lifecycle, [death])
        async with reconciler(pipeline) as second:
            await run_until_idle(second, projector)

    # then it fails that audit, once, with the classified code
    failed = [e for e in await lifecycle_events(pipeline.log) if isinstance(e, AuditFailed)]
    assert [(e.audit_id, e.data.error_code) for e in failed] == [("r7", "oom")]
    row = await pipeline.store.audits.get("r7")
    assert row is not None and (row.status, row.state.error_code) == ("failed", "oom")
    kinds = [h.event.type for h in await pipeline.store.audits.history("r7")]
    assert kinds == ["AuditStarted", "WorkflowStatusObserved", "AuditFailed"]


async def test_a_log_trimmed_behind_the_checkpoints_is_reported_at_assignment(
    pipeline: Pipeline,
) -> None:
    # given a log trimmed by hand (a topic retention set outside auditrec) before any checkpoint
    events: list[AuditEvent] = [started(f"r{i}", at(0), instance=f"wf-r{i}") for i in range(10)]
    await append(pipeline.log, pipeline.topics.lifecycle, events)
    ends = await pipeline.log.inspection.end_offsets(pipeline.topics.lifecycle)
    await pipeline.log.retention.trim(pipeline.topics.lifecycle, ends)

    # when a reconciler is assigned the partitions
    with structlog.testing.capture_logs() as logs:
        async with reconciler(pipeline) as component:
            await run_until_idle(component)

    # then it says, per partition that lost records, what is missing and how to avoid it
    gaps = [e for e in logs if e["event"].startswith("the lifecycle log no longer holds")]
    trimmed = {p for p, end in ends.items() if end > 1}
    assert {e["partition"] for e in gaps} == trimmed
    assert all(e["log_level"] == "error" and "RETENTION" in e["fix"] for e in gaps)


async def test_a_rebuild_over_a_trimmed_log_gives_the_same_table(pipeline: Pipeline) -> None:
    # given audits of every kind projected and reconciled, and the log trimmed behind them
    events: list[AuditEvent] = []
    for i in range(12):
        events += [
            started(f"a{i}", at(0), instance=f"wf-a{i}"),
            progressed(f"a{i}", at(1), current_phase="crawl", pages_crawled=i),
        ]
    events += [completed("a0", at(5)), observed("a1", "terminated", at(6), instance="wf-a1")]
    await append(pipeline.log, pipeline.topics.lifecycle, events)
    async with Projector(pipeline.log, pipeline.store.writer) as projector:
        async with reconciler(pipeline) as first:
            await run_until_idle(first, projector)
            await first.checkpoints.flush()  # type: ignore[union-attr]
        assert await retention(pipeline).trim()
        # and more after the trim
        late = [progressed("a2", at(9), pages_crawled=99), started("b0", at(9), instance="wf-b0")]
        await append(pipeline.log, pipeline.topics.lifecycle, late)
        await run_until_idle(projector)
    before = {r.audit_id: r.values() for r in await pipeline.store.audits.list_audits(limit=100)}
    histories = {a: await pipeline.store.audits.history(a) for a in before}

    # when the table is rebuilt
    backends = backends_of(pipeline)
    applied = await rebuild_projection(backends)

    # then every row and every history is as it was, from history set aside and the log
    assert applied == sum(len(h) for h in histories.values())
    after = {r.audit_id: r.values() for r in await pipeline.store.audits.list_audits(limit=100)}
    ignore = {"updated_at"}
    assert {a: {k: v for k, v in r.items() if k not in ignore} for a, r in after.items()} == {
        a: {k: v for k, v in r.items() if k not in ignore} for a, r in before.items()
    }
    for audit, history in histories.items():
        assert [h.event for h in await pipeline.store.audits.history(audit)] == [
            h.event for h in history
        ]
    assert before["a1"]["status"] == "failed" and before["a2"]["pages_crawled"] == 99
    # and the set-aside history is gone
    assert await pipeline.store.kept.keep_history({}) == 0
    await pipeline.store.kept.drop_kept_history()


async def test_a_rebuild_refuses_when_neither_the_log_nor_the_projection_holds_the_past(
    pipeline: Pipeline,
) -> None:
    # given a log trimmed by hand before anything was projected
    events: list[AuditEvent] = [started(f"r{i}", at(0), instance=f"wf-r{i}") for i in range(10)]
    await append(pipeline.log, pipeline.topics.lifecycle, events)
    await pipeline.log.retention.trim(
        pipeline.topics.lifecycle,
        await pipeline.log.inspection.end_offsets(pipeline.topics.lifecycle),
    )
    backends = backends_of(pipeline)

    # when a rebuild is asked for, it says why it cannot, and changes nothing
    with pytest.raises(InvalidInput, match="nowhere to rebuild from"):
        await rebuild_projection(backends)
    await pipeline.store.kept.drop_kept_history()
