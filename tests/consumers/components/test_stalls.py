"""Stalled audits on each backend pair, through the real pipeline (watchdog → probe against the
simulator → reconciler → projector): an audit whose publisher went silent while its instance
runs is reported, or has its instance terminated and fails ``stalled`` exactly once; a
sleeping or paused instance, fresh progress and a backdated ``occurred_at`` are never a stall;
the brake holds a burst of terminations; only watched workflows are ever terminated."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from consumers.eventlog.port import OutRecord
from consumers.operations.backtest import backtest
from consumers.workflows.client import WorkflowsClient
from consumers.workflows.simulator.server import SimulatorServer
from statemachine.events import (
    AuditEvent,
    AuditFailed,
    AuditFailureHeld,
    AuditFailureSimulated,
    ProbeRequested,
    ProbeRequestedData,
    Trigger,
    WorkflowTerminationRequested,
)
from statemachine.policy import Policy
from tests.consumers.components.stack import Stack
from tests.contracts.projection_store import completed, progressed, started
from tests.pipeline import Pipeline, append, append_raw, lifecycle_events, run_until_idle

QUIET = timedelta(seconds=1.5)  # AUDITREC_STALLED_AFTER in these tests
# In the test where fresh progress must not look stalled: longer than a drain and a tick take.
QUIET_WITH_PROGRESS = timedelta(seconds=6)
WORKFLOW = "site-audit"


def policy(action: str = "report", quiet: timedelta = QUIET, **changes: object) -> Policy:
    base = Policy(
        stalled_after=quiet,
        stalled_action=action,
        terminate_workflows=frozenset({WORKFLOW}),
        default_workflow=WORKFLOW,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def on_the_wall_clock(pipeline: Pipeline, client: WorkflowsClient, rules: Policy) -> Stack:
    """The pipeline on one backend pair, on the wall clock (progress is recorded on it)."""
    return Stack(
        pipeline,
        client,
        policy=rules,
        clock=None,
        stale_after=timedelta(0),
        terminable=frozenset({WORKFLOW}),
    )


def an_hour_ago() -> datetime:
    return datetime.now(UTC) - timedelta(hours=1)


def of(events: list[AuditEvent], kind: type[AuditEvent], audit_id: str) -> list[AuditEvent]:
    return [e for e in events if isinstance(e, kind) and e.audit_id == audit_id]


async def quiet_for_the_threshold(quiet: timedelta = QUIET) -> None:
    """Let the recorded progress age past AUDITREC_STALLED_AFTER (wall-clock time must pass:
    a stall is judged on when auditrec recorded the progress, never on what events claim)."""
    await asyncio.sleep(quiet.total_seconds() + 0.3)


async def test_a_silent_audit_whose_instance_runs_is_reported_stalled_and_keeps_running(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    sim = simulator.sim
    sim.set_instance("wf-silent", "running")
    sim.set_instance("wf-queued", "queued")
    error = {"name": "Error", "message": "fetch failed: 503"}
    sim.set_instance(
        "wf-retrying", "running", step={"name": "fetch", "attempts": 4, "error": error}
    )
    sim.set_instance("wf-waiting", "waiting")
    sim.set_instance("wf-paused", "paused")
    sim.set_instance("wf-busy", "running")
    sim.set_instance("wf-backdated", "running")
    names = ["silent", "queued", "retrying", "waiting", "paused", "busy", "backdated"]
    await append(
        pipeline.log,
        pipeline.topics.lifecycle,
        [started(n, an_hour_ago(), instance=f"wf-{n}") for n in names],
    )
    async with on_the_wall_clock(pipeline, client, policy("report", QUIET_WITH_PROGRESS)) as stack:
        await stack.drain()
        await quiet_for_the_threshold(QUIET_WITH_PROGRESS)
        # given progress recorded now, one of it claiming to have happened two hours ago
        backdated = datetime.now(UTC) - timedelta(hours=2)
        await append(
            pipeline.log,
            pipeline.topics.lifecycle,
            [progressed("busy", pages_crawled=3), progressed("backdated", backdated)],
        )
        await stack.drain()

        # when the watchdog ticks, twice
        await stack.sweep()
        await stack.sweep()

    # then the silent running or queued audits are reported stalled once each, and run on
    events = await lifecycle_events(pipeline.log)
    reported = Counter(
        e.audit_id
        for e in events
        if isinstance(e, AuditFailureSimulated) and e.data.rule == "stalled"
    )
    assert reported == {"silent": 1, "queued": 1, "retrying": 1}
    assert not [e for e in events if isinstance(e, AuditFailed | WorkflowTerminationRequested)]
    rows = {n: await pipeline.store.audits.get(n) for n in names}
    assert {n for n, r in rows.items() if r and r.state.stalled_at is not None} == set(reported)
    assert {r.status for r in rows.values() if r} == {"running"}
    # and the verdict shows its evidence: the progress it stood on, the retrying step
    (retrying,) = of(events, AuditFailureSimulated, "retrying")
    assert isinstance(retrying, AuditFailureSimulated)
    evidence = retrying.data.policy or {}
    assert (evidence["step"], evidence["step_attempts"], evidence["step_retrying"]) == (
        "fetch",
        4,
        True,
    )
    assert "retrying: Error: fetch failed: 503" in retrying.data.error_detail
    assert evidence["stalled_after_s"] == QUIET_WITH_PROGRESS.total_seconds()
    (silent,) = of(events, AuditFailureSimulated, "silent")
    assert isinstance(silent, AuditFailureSimulated)
    assert (silent.data.policy or {})["progress_event_id"] == rows["silent"].state.progress_event_id  # type: ignore[union-attr]
    # and nothing was terminated
    assert sum(sim.terminates_for(f"wf-{n}") for n in names) == 0


async def test_terminate_ends_the_instance_and_fails_the_audit_stalled_once(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    sim = simulator.sim
    sim.set_instance("wf-silent", "running")
    error = {"name": "Error", "message": "doomed call"}
    sim.set_instance(
        "wf-retrying", "running", step={"name": "fetch", "attempts": 9, "error": error}
    )
    # an audit naming someone else's workflow (not watched: never terminated)
    sim.set_instance("wf-theirs", "running", workflow="their-flow")
    await append(
        pipeline.log,
        pipeline.topics.lifecycle,
        [
            started("silent", an_hour_ago(), instance="wf-silent"),
            started("retrying", an_hour_ago(), instance="wf-retrying"),
            started("theirs", an_hour_ago(), instance="wf-theirs", workflow="their-flow"),
        ],
    )
    async with on_the_wall_clock(pipeline, client, policy("terminate")) as stack:
        await stack.drain()
        await quiet_for_the_threshold()

        # when the watchdog ticks
        await stack.sweep()

        # then each watched stalled instance is terminated once, and its audit fails stalled
        events = await lifecycle_events(pipeline.log)
        for name in ("silent", "retrying"):
            assert sim.terminates_for(f"wf-{name}") == 1
            assert len(of(events, WorkflowTerminationRequested, name)) == 1
            (failure,) = of(events, AuditFailed, name)
            assert isinstance(failure, AuditFailed)
            assert (failure.data.error_code, failure.data.rule) == ("stalled", "stalled")
            assert failure.data.workflow_status == "terminated"
            row = await pipeline.store.audits.get(name)
            assert row is not None and (row.status, row.state.error_code) == ("failed", "stalled")
        # and the other workflow's instance is never terminated: the stall is reported
        assert sim.terminates_for("wf-theirs") == 0
        assert len(of(events, AuditFailureSimulated, "theirs")) == 1
        assert not of(events, WorkflowTerminationRequested, "theirs")

        # when a termination of that instance is asked for directly on the probe topic
        forged = ProbeRequested(
            event_id=uuid.uuid4(),
            audit_id="theirs",
            occurred_at=datetime.now(UTC),
            producer="test",
            data=ProbeRequestedData(
                workflow_instance_id="wf-theirs",
                trigger=Trigger.WATCHDOG,
                workflow="their-flow",
                terminate=True,
            ),
        )
        await append(pipeline.log, pipeline.topics.probe_requests, [forged])
        # and the watchdog ticks again
        await stack.sweep()

    # then still nothing of theirs is terminated, and nothing else happened twice
    assert sim.terminates_for("wf-theirs") == 0
    assert sim.instance_view("wf-theirs", workflow="their-flow")["status"] == "running"  # type: ignore[index]
    events = await lifecycle_events(pipeline.log)
    assert Counter(e.audit_id for e in events if isinstance(e, AuditFailed)) == {
        "silent": 1,
        "retrying": 1,
    }
    assert sim.terminates_for("wf-silent") == sim.terminates_for("wf-retrying") == 1


async def test_shadow_mode_never_terminates(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    simulator.sim.set_instance("wf-silent", "running")
    await append(
        pipeline.log,
        pipeline.topics.lifecycle,
        [started("silent", an_hour_ago(), instance="wf-silent")],
    )
    async with on_the_wall_clock(pipeline, client, policy("terminate", shadow=True)) as stack:
        await stack.drain()
        await quiet_for_the_threshold()
        await stack.sweep()

    events = await lifecycle_events(pipeline.log)
    assert simulator.sim.terminates_for("wf-silent") == 0
    assert len(of(events, AuditFailureSimulated, "silent")) == 1
    assert not of(events, WorkflowTerminationRequested, "silent")
    assert not of(events, AuditFailed, "silent")


async def test_a_termination_racing_the_completion_never_fails_the_completed_audit(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    sim = simulator.sim
    sim.set_instance("wf-late", "running")
    await append(
        pipeline.log,
        pipeline.topics.lifecycle,
        [started("late", an_hour_ago(), instance="wf-late")],
    )
    async with on_the_wall_clock(pipeline, client, policy("terminate")) as stack:
        await stack.drain()
        await quiet_for_the_threshold()
        # given the stall verdict and its termination asked for, the probe not yet at it
        await stack.watchdog.tick()
        await run_until_idle(stack.probe)  # the stall check is read
        await run_until_idle(stack.projector, stack.reconciler)  # and judged
        events = await lifecycle_events(pipeline.log)
        assert len(of(events, WorkflowTerminationRequested, "late")) == 1
        assert sim.terminates_for("wf-late") == 0

        # when the workflow completes and reports it before the termination is carried out
        sim.set_instance("wf-late", "complete")
        await append(pipeline.log, pipeline.topics.lifecycle, [completed("late")])
        await stack.drain()

    # then the termination found it ended (409) and the audit stays completed, never failed
    assert sim.terminates_for("wf-late") == 1
    assert sim.instance_view("wf-late")["status"] == "complete"  # type: ignore[index]
    events = await lifecycle_events(pipeline.log)
    assert not of(events, AuditFailed, "late")
    row = await pipeline.store.audits.get("late")
    assert row is not None and row.status == "completed" and not row.state.overturned


async def test_a_completion_after_the_stall_failure_overturns_it(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    simulator.sim.set_instance("wf-late", "running")
    await append(
        pipeline.log,
        pipeline.topics.lifecycle,
        [started("late", an_hour_ago(), instance="wf-late")],
    )
    async with on_the_wall_clock(pipeline, client, policy("terminate")) as stack:
        await stack.drain()
        await quiet_for_the_threshold()
        await stack.sweep()
        row = await pipeline.store.audits.get("late")
        assert row is not None and (row.status, row.state.error_code) == ("failed", "stalled")

        # when the workflow's own completion arrives after all
        await append(pipeline.log, pipeline.topics.lifecycle, [completed("late")])
        await stack.drain()

    row = await pipeline.store.audits.get("late")
    assert row is not None and row.status == "completed" and row.state.overturned
    assert simulator.sim.terminates_for("wf-late") == 1


async def test_the_brake_holds_a_burst_of_terminations_until_an_operator_releases_them(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    names = [f"s-{i:02}" for i in range(22)]
    for n in names:
        simulator.sim.set_instance(f"wf-{n}", "running")
    await append(
        pipeline.log,
        pipeline.topics.lifecycle,
        [started(n, an_hour_ago(), instance=f"wf-{n}") for n in names],
    )
    async with on_the_wall_clock(pipeline, client, policy("terminate")) as stack:
        await stack.drain()
        await quiet_for_the_threshold()

        # when one tick finds all 22 stalled (more than the brake's 20)
        await stack.sweep()

        # then nothing is terminated: the terminations are held, the brake engaged
        assert sum(simulator.sim.terminates_for(f"wf-{n}") for n in names) == 0
        events = await lifecycle_events(pipeline.log)
        assert {e.audit_id for e in events if isinstance(e, AuditFailureHeld)} == set(names)
        assert not [e for e in events if isinstance(e, WorkflowTerminationRequested)]
        assert (await pipeline.store.brake.state()).engaged is True
        assert len(await pipeline.store.brake.held_audits()) == 22
        rows = [await pipeline.store.audits.get(n) for n in names]
        assert all(r is not None and r.state.stalled_at is not None for r in rows)

        # and another tick while it is engaged holds no second decision and terminates nothing
        await stack.sweep()
        assert sum(simulator.sim.terminates_for(f"wf-{n}") for n in names) == 0

        # when an operator releases them
        await stack.brake.end("released", "cli:ops", "the crawler is stuck", dry_run=False)
        await stack.drain()

    # then each instance is terminated once and each audit fails stalled once
    assert [simulator.sim.terminates_for(f"wf-{n}") for n in names] == [1] * 22
    events = await lifecycle_events(pipeline.log)
    failures = [e for e in events if isinstance(e, AuditFailed)]
    assert Counter(e.audit_id for e in failures) == dict.fromkeys(names, 1)
    assert {e.data.error_code for e in failures if isinstance(e, AuditFailed)} == {"stalled"}
    assert await pipeline.store.audits.count_by_status() == {"failed": 22}


async def test_backtest_tells_what_a_stall_threshold_would_have_done(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    simulator.sim.set_instance("wf-silent", "running")
    simulator.sim.set_instance("wf-waiting", "waiting")
    await append(
        pipeline.log,
        pipeline.topics.lifecycle,
        [
            started("silent", an_hour_ago(), instance="wf-silent"),
            started("waiting", an_hour_ago(), instance="wf-waiting"),
        ],
    )
    # given a history observed with stall detection off
    async with on_the_wall_clock(pipeline, client, Policy()) as stack:
        await stack.drain()
        await quiet_for_the_threshold()
        await stack.sweep()
    events = await lifecycle_events(pipeline.log)
    assert not [e for e in events if isinstance(e, AuditFailureSimulated | AuditFailed)]

    # when it is backtested with a stall threshold, and with one longer than the silence
    found = await backtest(pipeline.store.audits, Policy(), ["STALLED_AFTER=1s"])
    longer = await backtest(pipeline.store.audits, Policy(), ["STALLED_AFTER=1h"])

    # then the silent running audit would have failed stalled; the sleeping one never
    assert [(d["audit_id"], d["kind"], d["rule"]) for d in found["differences"]] == [
        ("silent", "failed", "stalled")
    ]
    assert found["differences"][0]["tested"]["error_code"] == "stalled"
    assert found["summary"] == {"stalled": {"failed": 1}}
    assert longer["differences"] == []


async def test_an_audit_of_another_workflow_is_probed_in_that_workflow(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    sim = simulator.sim
    # the instance exists in keyword-research only, and errored there
    sim.set_instance(
        "kr-1",
        "errored",
        workflow="keyword-research",
        error={"name": "Error", "message": "Worker exceeded memory limit"},
    )
    sim.set_instance(
        "old-1", "errored", error={"name": "Error", "message": "Exceeded CPU Time Limit"}
    )
    await append(
        pipeline.log,
        pipeline.topics.lifecycle,
        [started("kr", an_hour_ago(), instance="kr-1", workflow="keyword-research")],
    )
    # and an audit started by a version 1 event, which names no workflow
    old = {
        "event_id": str(uuid.uuid4()),
        "type": "AuditStarted",
        "schema_version": 1,
        "audit_id": "old",
        "occurred_at": an_hour_ago().isoformat(),
        "producer": "crawler",
        "data": {"project_id": "p-1", "workflow_instance_id": "old-1"},
    }
    await append_raw(
        pipeline.log,
        [
            OutRecord(
                pipeline.topics.lifecycle,
                "old",
                json.dumps(old).encode(),
                (("event-type", b"AuditStarted"), ("schema-version", b"1")),
            )
        ],
    )
    async with on_the_wall_clock(pipeline, client, Policy()) as stack:
        await stack.sweep()

    kr = await pipeline.store.audits.get("kr")
    assert kr is not None
    assert (kr.state.workflow, kr.status, kr.state.error_code) == (
        "keyword-research",
        "failed",
        "oom",
    )
    row = await pipeline.store.audits.get("old")
    assert row is not None
    assert (row.state.workflow, row.status, row.state.error_code) == (None, "failed", "cpu_limit")


@pytest.mark.parametrize("status", ["waiting", "waitingForPause", "paused"])
async def test_an_instance_waiting_by_design_is_never_a_stall(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer, status: str
) -> None:
    simulator.sim.set_instance("wf-sleeping", status)
    await append(
        pipeline.log,
        pipeline.topics.lifecycle,
        [started("sleeping", an_hour_ago(), instance="wf-sleeping")],
    )
    async with on_the_wall_clock(pipeline, client, policy("terminate")) as stack:
        await stack.drain()
        await quiet_for_the_threshold()
        await stack.sweep()

    events = await lifecycle_events(pipeline.log)
    assert not [
        e
        for e in events
        if isinstance(e, AuditFailureSimulated | WorkflowTerminationRequested | AuditFailed)
    ]
    assert simulator.sim.terminates_for("wf-sleeping") == 0
