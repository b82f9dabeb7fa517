"""The mass-failure brake on each backend pair, through the real pipeline (watchdog → probe
against the simulator → reconciler → projector): a sweep whose ``instance_lost`` decisions are
too many is held, not applied; a sweep under the threshold fails its lost audits as usual; an
operator releases or discards what is held, and each held failure takes effect exactly once."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from consumers.components.brake import Brake
from consumers.workflows.client import WorkflowsClient
from consumers.workflows.simulator.server import SimulatorServer
from statemachine.events import (
    AuditEvent,
    AuditFailed,
    AuditFailureHeld,
    AuditFailureReleased,
    Trigger,
    derived_id,
)
from statemachine.policy import Policy
from tests.consumers.components.stack import NOW, POLICY, Stack
from tests.contracts.projection_store import CONSUMER, at, failed, positioned, started
from tests.pipeline import Pipeline, append, lifecycle_events, probe_request


async def given_running(pipeline: Pipeline, sim: SimulatorServer, lost: int, alive: int) -> None:
    events: list[AuditEvent] = []
    for i in range(lost):
        events.append(started(f"lost-{i:02}", at(0), instance=f"wf-lost-{i}"))  # not in the API
    for i in range(alive):
        events.append(started(f"alive-{i:02}", at(0), instance=f"wf-alive-{i}"))
        sim.sim.set_instance(f"wf-alive-{i}", "running")
    await append(pipeline.log, pipeline.topics.lifecycle, events)


def of_type(events: list[AuditEvent], kind: type[AuditEvent]) -> list[AuditEvent]:
    return [e for e in events if isinstance(e, kind)]


async def test_a_sweep_that_would_fail_too_many_is_held_until_an_operator_releases_it(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    # given 25 running audits whose instances the API says do not exist, and 5 alive ones
    await given_running(pipeline, simulator, lost=25, alive=5)

    async with Stack(pipeline, client) as stack:
        # when the watchdog sweeps them
        await stack.sweep()

        # then nothing failed: the 25 decisions are held, and the brake is engaged
        events = await lifecycle_events(pipeline.log)
        assert of_type(events, AuditFailed) == []
        held = of_type(events, AuditFailureHeld)
        assert sorted(e.audit_id for e in held) == [f"lost-{i:02}" for i in range(25)]
        brake = await pipeline.store.brake.state()
        assert (brake.engaged, brake.lost, brake.observations) == (True, 25, 30)
        counts = await pipeline.store.audits.count_by_status()
        assert counts == {"running": 30}
        assert len(await pipeline.store.brake.held_audits()) == 25

        # and a reconciler restarted meanwhile still knows what it holds
        await stack.reconciler.stop()
        await stack.reconciler.start()

        # when an operator releases the holds
        ended = await stack.brake.end(
            "released", "cli:ops", "provider incident over", dry_run=False
        )
        assert (ended.was_engaged, len(ended.holds)) == (True, 25)
        await stack.drain()

        # then each held failure takes effect once, as the decision it would have been
        events = await lifecycle_events(pipeline.log)
        failures = of_type(events, AuditFailed)
        assert Counter(e.audit_id for e in failures) == {f"lost-{i:02}": 1 for i in range(25)}
        for failure in failures:
            assert isinstance(failure, AuditFailed)
            assert failure.data.error_code == "instance_lost"
            assert failure.data.failed_by.value == "reconciler"
            assert failure.data.rule == "instance_lost"
            assert failure.data.policy is not None
            assert failure.data.policy["released_by"] == "cli:ops"
            hold = next(h for h in held if h.audit_id == failure.audit_id)
            assert failure.event_id == derived_id(hold.causation_id or "", "reconciler-decision")
        assert await pipeline.store.audits.count_by_status() == {"running": 5, "failed": 25}
        assert await pipeline.store.brake.held_audits() == []
        assert (await pipeline.store.brake.state()).engaged is False

        # and releasing again changes nothing
        again = await stack.brake.end("released", "cli:ops", None, dry_run=False)
        assert again.holds == [] and again.was_engaged is False
        await stack.drain()
        assert len(of_type(await lifecycle_events(pipeline.log), AuditFailed)) == 25


async def test_a_sweep_under_the_threshold_fails_its_lost_audits_after_its_verdict(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    # given a sweep of 25 audits (large enough to be watched) of which 5 are lost
    await given_running(pipeline, simulator, lost=5, alive=20)

    async with Stack(pipeline, client) as stack:
        # when the watchdog sweeps them
        await stack.sweep()

    # then the 5 were held only until the verdict, then failed once each; the brake is off
    events = await lifecycle_events(pipeline.log)
    assert len(of_type(events, AuditFailureHeld)) == 5
    assert len(of_type(events, AuditFailureReleased)) == 5
    assert Counter(e.audit_id for e in of_type(events, AuditFailed)) == {
        f"lost-{i:02}": 1 for i in range(5)
    }
    assert (await pipeline.store.brake.state()).engaged is False
    assert await pipeline.store.audits.count_by_status() == {"running": 20, "failed": 5}
    assert await pipeline.store.sweeps.open_sweeps() == []


async def test_a_small_sweep_is_not_held(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    # given a sweep of 10 audits, all lost: fewer than the brake's minimum
    await given_running(pipeline, simulator, lost=10, alive=0)

    async with Stack(pipeline, client) as stack:
        await stack.drain()
        await stack.watchdog.tick()
        await stack.drain()

    # then they fail at once, with no hold and no sweep awaiting a verdict
    events = await lifecycle_events(pipeline.log)
    assert of_type(events, AuditFailureHeld) == []
    assert len(of_type(events, AuditFailed)) == 10
    assert await pipeline.store.sweeps.open_sweeps() == []


async def test_discarded_holds_keep_their_audits_running_and_an_engaged_brake_holds_any_loss(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    # given a blip: 30 live audits whose instances the API cannot find
    await given_running(pipeline, simulator, lost=30, alive=0)
    async with Stack(pipeline, client) as stack:
        await stack.sweep()
        assert (await pipeline.store.brake.state()).engaged is True

        # when an on-demand probe of one more lost audit arrives while the brake is engaged
        await append(pipeline.log, pipeline.topics.lifecycle, [started("late", instance="wf-late")])
        request = probe_request("late", "wf-late", NOW, Trigger.ON_DEMAND)
        await append(pipeline.log, pipeline.topics.probe_requests, [request])
        await stack.drain()

        # then it is held too
        held_ids = {r.audit_id for r in await pipeline.store.brake.held_audits()}
        assert "late" in held_ids and len(held_ids) == 31

        # when the operator discards the holds (the instances were there all along)
        for instance in [f"wf-lost-{i}" for i in range(30)] + ["wf-late"]:
            simulator.sim.set_instance(instance, "running")
        ended = await stack.brake.end("discarded", "ops-token", "API blip", dry_run=False)
        assert len(ended.holds) == 31
        await stack.drain()

        # then nothing failed, nothing is held, and the next sweep finds them healthy
        assert await pipeline.store.brake.held_audits() == []
        assert await pipeline.store.audits.count_by_status() == {"running": 31}
        stack.watchdog.clock = lambda: NOW + timedelta(minutes=5)
        await stack.sweep()
        events = await lifecycle_events(pipeline.log)
        assert of_type(events, AuditFailed) == []
        row = await pipeline.store.audits.get("lost-00")
        assert row is not None and row.state.last_observed_status == "running"


# --- the sliding window: decisions that belong to no sweep --------------------------------------


async def test_instance_lost_failures_outside_sweeps_engage_the_brake_over_its_window(
    pipeline: Pipeline,
) -> None:
    store = pipeline.store
    brake = Brake(
        pipeline.log, store, POLICY, owner="t", clock=lambda: NOW, window=timedelta(minutes=5)
    )

    def lost(audit_id: str, minute: int, by: str) -> AuditEvent:
        return failed(
            audit_id, NOW - timedelta(minutes=minute), by="reconciler", code="instance_lost",
            reconciled_by=by, rule="instance_lost",
        )  # fmt: skip

    events: list[AuditEvent] = []
    for i in range(19):  # found by status reads and the event subscription, within the window
        events += [
            started(f"a-{i}", at(0)),
            lost(f"a-{i}", 1, ("on_demand", "subscription")[i % 2]),
        ]
    for i in range(30):  # the watchdog's sweeps judge their own; older ones are out of it
        events += [started(f"w-{i}", at(0)), lost(f"w-{i}", 1, "watchdog")]
        events += [started(f"o-{i}", at(0)), lost(f"o-{i}", 6, "on_demand")]
    await store.writer.apply(positioned(events), {}, CONSUMER)

    assert await brake.judge_window() is False
    assert not (await store.brake.state()).engaged

    await store.writer.apply(
        positioned([started("a-19", at(0)), lost("a-19", 0, "subscription")]), {}, CONSUMER
    )
    assert await brake.judge_window() is True
    state = await store.brake.state()
    assert state.engaged and state.lost == 20 and (state.sweep_id or "").startswith("window-")

    # released by an operator: what came before the release does not engage it again
    await store.brake.end_brake("released", "cli:ops", NOW)
    assert await brake.judge_window() is False
    assert not (await store.brake.state()).engaged


async def test_without_a_window_or_with_the_brake_off_nothing_is_judged(pipeline: Pipeline) -> None:
    events: list[AuditEvent] = []
    for i in range(25):
        events += [started(f"a-{i}", at(0))]
        events += [
            failed(f"a-{i}", NOW, by="reconciler", code="instance_lost",
                   reconciled_by="subscription", rule="instance_lost")
        ]  # fmt: skip
    await pipeline.store.writer.apply(positioned(events), {}, CONSUMER)
    off = Policy(brake_min_audits=0)
    for brake in (
        Brake(pipeline.log, pipeline.store, POLICY, owner="t", clock=lambda: NOW),
        Brake(pipeline.log, pipeline.store, off, owner="t", clock=lambda: NOW,
              window=timedelta(minutes=5)),
    ):  # fmt: skip
        assert await brake.judge_window() is False
    assert not (await pipeline.store.brake.state()).engaged
