"""The mass-failure brake in the pure core: which decisions are held, what a hold does to the
audit, and the failure a release lets through (DESIGN §9)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine.events import (
    AuditEvent,
    AuditFailed,
    AuditFailureDiscarded,
    AuditFailureHeld,
    AuditFailureReleased,
    AuditFailureSimulated,
    WorkflowStatusObserved,
    derived_id,
)
from statemachine.explain import explain
from statemachine.policy import Policy
from statemachine.rules import decide, released
from statemachine.state import AuditState, evolve, fold
from tests.statemachine.sm_builders import (
    AUDIT,
    at,
    attached,
    completed,
    observed,
    running,
    started,
    state_of,
)
from tests.statemachine.test_properties import histories

POLICY = Policy()  # brake at 20 audits and more than half
LATE = at(60)  # past the instance-lost grace


def hold_of(state: AuditState, **observation: object) -> AuditFailureHeld:
    obs = observed("not_found", when=LATE, **observation)  # type: ignore[arg-type]
    _, decision = decide(state, obs, POLICY)
    assert isinstance(decision, AuditFailureHeld)
    return decision


def release(hold: AuditFailureHeld, actor: str = "cli:ops") -> AuditFailureReleased:
    return AuditFailureReleased(
        event_id=derived_id(hold.event_id, "release"),
        audit_id=hold.audit_id,
        occurred_at=at(70),
        producer="test",
        data={"held_id": hold.event_id, "actor": actor, "reason": "incident over"},
    )


def discard(hold: AuditFailureHeld) -> AuditFailureDiscarded:
    return AuditFailureDiscarded(
        event_id=uuid.uuid4(),
        audit_id=hold.audit_id,
        occurred_at=at(70),
        producer="test",
        data={"held_id": hold.event_id, "actor": "ops"},
    )


@pytest.mark.parametrize("size", [20, 100])
def test_an_instance_lost_decision_of_a_large_sweep_is_held_with_the_failure_it_would_be(
    size: int,
) -> None:
    # given a running audit, when a sweep of `size` ≥ 20 audits finds its instance gone
    obs = observed("not_found", when=LATE, sweep_size=size)
    verdict, decision = decide(running(), obs, POLICY)

    # then the decision is held: the failure it would have been, under the rule that fired
    assert isinstance(decision, AuditFailureHeld)
    assert decision.event_id == derived_id(obs.event_id, "reconciler-hold")
    assert decision.causation_id == obs.event_id
    assert decision.data.decision.error_code == "instance_lost"
    assert decision.data.decision.rule == "instance_lost"
    assert decision.data.sweep_id == "sweep-1"
    assert verdict is not None and "held" in verdict.reason
    # and folding it changes no status, only records the hold
    after = evolve(evolve(running(), obs), decision)
    assert after.status == "running"
    assert (after.held_decision_id, after.held_at) == (str(decision.event_id), LATE)


@pytest.mark.parametrize(
    ("size", "trigger", "engaged", "policy"),
    [
        (19, "watchdog", False, POLICY),  # too small to trip the brake
        (None, "on_demand", False, POLICY),  # not a sweep
        (100, "watchdog", False, Policy(brake_min_audits=0)),  # the brake is off
        (100, "watchdog", True, Policy(shadow=True)),  # shadow mode fails nothing anyway
    ],
)
def test_other_instance_lost_decisions_are_not_held(
    size: int | None, trigger: str, engaged: bool, policy: Policy
) -> None:
    obs = observed("not_found", when=LATE, sweep_size=size, trigger=trigger)
    _, decision = decide(running(), obs, policy, brake_engaged=engaged)
    assert isinstance(decision, AuditFailed | AuditFailureSimulated)
    assert decision.data.error_code == "instance_lost"


def test_while_the_brake_is_engaged_any_instance_lost_decision_is_held() -> None:
    obs = observed("not_found", when=LATE, trigger="on_demand")
    _, decision = decide(running(), obs, POLICY, brake_engaged=True)
    assert isinstance(decision, AuditFailureHeld)
    assert decision.data.reason == "the mass-failure brake is engaged"


@pytest.mark.parametrize("status", ["errored", "terminated", "complete"])
def test_decisions_on_positive_evidence_are_never_held(status: str) -> None:
    obs = observed(status, when=LATE, ended=at(1), sweep_size=100)
    _, decision = decide(running(), obs, POLICY, brake_engaged=True)
    assert isinstance(decision, AuditFailed)


def test_an_audit_with_a_held_decision_gets_no_second_one_until_the_hold_ends() -> None:
    # given an audit whose instance_lost decision is held
    state = running()
    hold = hold_of(state, sweep_size=50)
    held = evolve(state, hold)

    # when the next sweep finds it gone again
    verdict, decision = decide(held, observed("not_found", when=at(65), sweep_size=50), POLICY)

    # then no second decision is made
    assert decision is None
    assert verdict is not None and "already held" in verdict.reason


def test_a_release_lets_the_held_failure_through_once_as_the_decision_it_would_have_been() -> None:
    state = running()
    hold = hold_of(state, sweep_size=50)
    held = evolve(state, hold)

    failure = released(held, release(hold), hold)

    assert isinstance(failure, AuditFailed)
    assert failure.event_id == derived_id(hold.causation_id or "", "reconciler-decision")
    assert failure.causation_id == hold.causation_id
    assert failure.data.policy is not None and failure.data.policy["released_by"] == "cli:ops"
    after = evolve(evolve(held, release(hold)), failure)
    assert after.status == "failed" and after.held_decision_id is None
    # and a second release of the same hold lets nothing through
    assert released(evolve(held, release(hold)), release(hold), hold) is None


def test_a_hold_ends_when_discarded_completed_reattached_or_the_instance_is_found() -> None:
    state = running()
    hold = hold_of(state, sweep_size=50)
    held = evolve(state, hold)
    assert held.held_decision_id is not None

    ends = {
        "discarded": discard(hold),
        "completed": completed(when=at(66)),
        "reattached": attached("wf-new", when=at(66)),
        "found running": observed("running", when=at(66)),
    }
    for why, event in ends.items():
        after = evolve(held, event)
        assert after.held_decision_id is None, why
        assert released(after, release(hold), hold) is None, why
    # a release of another hold, or a second not_found, leaves it as it is
    other = hold_of(running(), sweep_size=50)
    assert evolve(held, release(other)).held_decision_id == str(hold.event_id)
    assert evolve(held, observed("not_found", when=at(66))).held_decision_id is not None


def test_holds_on_a_terminal_audit_are_recorded_not_applied() -> None:
    state = running()
    hold = hold_of(state, sweep_size=50)
    done = state_of(started(), completed(when=at(5)))
    assert evolve(done, hold) == done
    assert evolve(done, release(hold)) == done


def test_replay_explains_the_hold_and_the_release_with_who_released_it() -> None:
    state = running()
    obs = observed("not_found", when=LATE, sweep_size=50)
    _, hold = decide(state, obs, POLICY)
    assert isinstance(hold, AuditFailureHeld)
    rel = release(hold, actor="cli:alice")
    failure = released(evolve(evolve(state, obs), hold), rel, hold)
    assert failure is not None
    history = [started(), obs, hold, rel, failure]

    steps = {
        s.event.type: s for s in explain(history, Policy(instance_lost_grace=timedelta(hours=9)))
    }

    # the observation is judged under the policy the hold recorded, not today's 9 h grace
    assert steps["WorkflowStatusObserved"].rule == "instance_lost"
    assert "held by the mass-failure brake" in steps["WorkflowStatusObserved"].reason
    assert steps["AuditFailureHeld"].after == "running"
    assert "instance_lost held" in steps["AuditFailureHeld"].reason
    assert steps["AuditFailureReleased"].rule == "hold_released"
    assert "cli:alice" in steps["AuditFailureReleased"].reason
    assert steps["AuditFailed"].after == "failed"
    assert "released by cli:alice" in steps["AuditFailed"].reason
    assert fold(history) is not None and fold(history).status == "failed"  # type: ignore[union-attr]
    assert hold.audit_id == AUDIT


def test_replay_tells_observations_while_a_decision_is_held_as_held_not_as_failures() -> None:
    # given a hold, then two more sweeps finding the instance gone, then a healthy probe
    state = running()
    obs = observed("not_found", when=LATE, sweep_size=50)
    _, hold = decide(state, obs, POLICY)
    assert isinstance(hold, AuditFailureHeld)
    again = [observed("not_found", when=at(65 + i), sweep_size=50) for i in range(2)]
    history = [started(), obs, hold, *again]

    # when the history is explained
    steps = explain(history, POLICY)

    # then the observation that made the hold, the hold and the later ones are holds
    assert [s.held for s in steps] == [False, True, True, True, True]
    for later in steps[3:]:
        assert later.rule == "instance_lost" and later.after == "running"
        assert later.reason.endswith("a decision is already held → no second decision")
        assert "no decision was recorded" not in later.reason
        assert not later.no_change


def test_replay_marks_observations_that_change_nothing() -> None:
    history = [started(), observed("running", when=at(5)), observed("not_found", when=at(6))]

    steps = explain(history, POLICY)

    # then the healthy one and the one within the grace change nothing; neither is a hold
    assert [(s.rule, s.no_change, s.held) for s in steps[1:]] == [
        ("healthy", True, False),
        ("instance_lost", True, False),
    ]


@settings(max_examples=300, deadline=None)
@given(histories(), st.data())
def test_under_any_brake_and_releases_a_hold_never_changes_status_and_no_audit_fails_twice(
    events: list[AuditEvent], data: st.DataObject
) -> None:
    # given any history, judged with the brake engaged or not at each step, large sweeps, and
    # releases of the pending hold arriving at any point (sometimes twice)
    state: AuditState | None = None
    holds: dict[str, AuditFailureHeld] = {}
    failures = 0
    for event in events:
        if isinstance(event, WorkflowStatusObserved):
            event = event.model_copy(
                update={"data": event.data.model_copy(update={"sweep_size": 50})}
            )
        engaged = data.draw(st.booleans())
        _, decision = decide(state, event, POLICY, brake_engaged=engaged)
        state = evolve(state or AuditState(audit_id=event.audit_id), event)
        if decision is not None:
            before = state.status
            state = evolve(state, decision)
            if isinstance(decision, AuditFailureHeld):
                assert state.status == before  # then: a hold changes no status
                holds[str(decision.event_id)] = decision
            elif isinstance(decision, AuditFailed):
                failures += 1
        for _ in range(data.draw(st.integers(0, 2))):
            pending = state.held_decision_id
            if pending is None:
                break
            rel = release(holds[pending])
            let_through = released(state, rel, holds[pending])
            state = evolve(state, rel)
            if let_through is not None:
                failures += 1
                state = evolve(state, let_through)
    # then: at most one reconciler failure per audit, and a terminal audit holds nothing
    assert failures <= 1
    if state is not None and state.status != "running":
        assert state.held_decision_id is None
