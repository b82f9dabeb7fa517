"""The stall rule in the pure core (DESIGN §10): on which progress a stall stands, what it
records in each mode, how a held termination lives, and what replay says of it."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime, timedelta

import pytest

from statemachine.events import (
    AuditEvent,
    AuditFailed,
    AuditFailureHeld,
    AuditFailureReleased,
    AuditFailureSimulated,
    Progress,
    WorkflowStatusObserved,
    WorkflowTerminationRequested,
)
from statemachine.explain import explain
from statemachine.policy import Policy
from statemachine.rules import decide, released, released_termination
from statemachine.state import AuditState, evolve
from tests.statemachine.sm_builders import at, observed, progressed, running, started, state_of

QUIET = timedelta(minutes=45)
REPORT = Policy(stalled_after=QUIET, terminate_workflows=frozenset({"site-audit"}))
TERMINATE = dataclasses.replace(REPORT, stalled_action="terminate")
CHECKED_AT, RECORDED_AT = at(120), at(1)


def checked(
    state: AuditState,
    status: str = "running",
    *,
    when: datetime = CHECKED_AT,
    recorded: datetime = RECORDED_AT,
) -> WorkflowStatusObserved:
    """An observation read for a stall check, standing on the audit's latest progress."""
    obs = observed(status, when=when)
    assert state.progress_event_id is not None
    progress = Progress(event_id=uuid.UUID(state.progress_event_id), recorded_at=recorded)
    return obs.model_copy(update={"data": obs.data.model_copy(update={"progress": progress})})


def test_a_silent_running_audit_is_reported_and_keeps_running() -> None:
    state = running()
    verdict, decision = decide(state, checked(state), REPORT)

    assert verdict is not None and verdict.rule == "stalled"
    assert isinstance(decision, AuditFailureSimulated)
    assert (decision.data.error_code, decision.data.rule) == ("stalled", "stalled")
    after = evolve(evolve(state, checked(state)), decision)
    assert after.status == "running" and after.stalled_at == decision.occurred_at
    # and it is reported once: the next check changes nothing
    _, again = decide(after, checked(after, when=at(125)), REPORT)
    assert again is None


def test_silence_shorter_than_the_threshold_is_no_stall() -> None:
    state = running()
    verdict, decision = decide(
        state, checked(state, when=at(1) + QUIET - timedelta(seconds=1)), REPORT
    )
    assert decision is None and verdict is not None and verdict.rule == "healthy"
    _, at_threshold = decide(state, checked(state, when=at(1) + QUIET), REPORT)
    assert isinstance(at_threshold, AuditFailureSimulated)


def test_progress_since_the_check_was_asked_voids_it() -> None:
    # given a check asked on the audit's progress, and progress published before it was judged
    state = running()
    obs = checked(state)
    moved = evolve(state, progressed(when=at(100), crawled=5))

    verdict, decision = decide(moved, obs, TERMINATE)

    assert decision is None and verdict is not None and verdict.rule == "healthy"


@pytest.mark.parametrize("status", ["waiting", "waitingForPause", "paused", "rollingBack"])
def test_an_instance_not_running_or_queued_is_never_stalled(status: str) -> None:
    state = running()
    verdict, decision = decide(state, checked(state, status), TERMINATE)
    assert decision is None and verdict is not None and verdict.rule == "healthy"


def test_terminate_asks_for_the_termination_then_fails_stalled_once_it_is_observed() -> None:
    state = running()
    obs = checked(state)
    _, request = decide(state, obs, TERMINATE)
    assert isinstance(request, WorkflowTerminationRequested)
    assert (request.data.workflow_instance_id, request.data.workflow) == ("wf-1", "site-audit")
    assert request.data.decision.error_code == "stalled"
    asked = evolve(evolve(state, obs), request)
    assert asked.termination_requested_at == request.occurred_at

    # when the termination is observed
    _, failure = decide(asked, observed("terminated", when=at(121)), TERMINATE)

    # then the audit fails stalled, and a second observation of it decides nothing
    assert isinstance(failure, AuditFailed)
    assert (failure.data.error_code, failure.data.rule) == ("stalled", "stalled")
    done = evolve(asked, failure)
    assert done.status == "failed" and done.stalled_at is None
    _, again = decide(done, observed("terminated", when=at(122)), TERMINATE)
    assert again is None


def test_an_audit_of_a_workflow_not_terminable_is_reported_and_shadow_mode_never_terminates() -> (
    None
):
    theirs = state_of(started(workflow="their-flow"), progressed(when=at(1), crawled=1))
    _, decision = decide(theirs, checked(theirs), TERMINATE)
    assert isinstance(decision, AuditFailureSimulated)

    state = running()
    _, shadow = decide(state, checked(state), dataclasses.replace(TERMINATE, shadow=True))
    assert isinstance(shadow, AuditFailureSimulated)


def test_a_held_termination_stands_while_the_instance_runs_and_progress_ends_it() -> None:
    # given a termination held by the engaged brake
    state = running()
    obs = checked(state)
    _, hold = decide(state, obs, TERMINATE, brake_engaged=True)
    assert isinstance(hold, AuditFailureHeld)
    held = evolve(evolve(state, obs), hold)
    assert held.held_decision_id == str(hold.event_id) and held.stalled_at is not None

    # when the instance is read running again, the hold stands (unlike a loss's)
    still = evolve(held, observed("running", when=at(130)))
    assert still.held_decision_id == str(hold.event_id)

    # when the publisher speaks again, the hold ends and the audit is no longer stalled
    moved = evolve(still, progressed(when=at(131), crawled=6))
    assert moved.held_decision_id is None and moved.stalled_at is None


def test_replay_explains_a_termination_request() -> None:
    history: list[AuditEvent] = [
        started(pages_total=10),
        progressed(when=at(1), phase="crawl", crawled=3),
    ]
    state = state_of(*history)
    obs = checked(state)
    _, request = decide(state, obs, TERMINATE)
    assert request is not None

    steps = explain([*history, obs, request], REPORT)  # the decision's own policy applies

    assert steps[-2].rule == "stalled" and "terminate the instance" in steps[-2].reason
    assert steps[-1].rule == "stalled" and "termination of instance 'wf-1'" in steps[-1].reason


def test_a_released_termination_is_asked_for_when_it_is_released() -> None:
    # given a termination held by the engaged brake, released half an hour later
    state = running()
    obs = checked(state)
    _, hold = decide(state, obs, TERMINATE, brake_engaged=True)
    assert isinstance(hold, AuditFailureHeld)
    held = evolve(evolve(state, obs), hold)
    release = AuditFailureReleased(
        event_id=uuid.uuid4(),
        audit_id=hold.audit_id,
        occurred_at=at(150),
        producer="test",
        data={"held_id": hold.event_id, "actor": "cli:ops"},
    )

    # when the reconciler lets it through
    request = released_termination(held, release, hold, TERMINATE)

    # then the termination is asked for now (the probe acts on recent requests only), once
    assert isinstance(request, WorkflowTerminationRequested)
    assert request.occurred_at == at(150)
    assert (request.data.decision.policy or {})["released_by"] == "cli:ops"
    assert released(held, release, hold) is None  # no failure before the termination
