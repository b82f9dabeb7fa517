"""Operator actions in the core: ``AuditRestored`` (failed → running, only for a failure by the
reconciler or an operator), an operator's ``AuditFailed``, and how replay explains both."""

from __future__ import annotations

import uuid
from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine.events import AuditEvent, AuditFailed, AuditRestored
from statemachine.explain import explain
from statemachine.machine import TERMINAL, next_status
from statemachine.policy import Policy
from statemachine.rules import decide
from statemachine.state import AuditState, evolve, fold
from tests.statemachine.sm_builders import (
    AUDIT,
    INSTANCE,
    T0,
    at,
    completed,
    failed,
    new_id,
    observed,
    started,
)

POLICY = Policy()


def operator_failed(*, when: datetime = T0, actor: str = "ops-token") -> AuditFailed:
    return AuditFailed(
        event_id=new_id(),
        audit_id=AUDIT,
        occurred_at=when,
        producer="auditrec-operator",
        data={
            "error_code": "workflow_terminated",
            "error_detail": "stuck since the deploy",
            "failed_by": "operator",
            "actor": actor,
        },
    )


def restored(
    failure: AuditFailed, *, when: datetime = T0, actor: str = "alice", reason: str = "alive"
) -> AuditRestored:
    return AuditRestored(
        event_id=new_id(),
        audit_id=AUDIT,
        occurred_at=when,
        producer="auditrec-operator",
        data={
            "reason": reason,
            "actor": actor,
            "failure_id": failure.event_id,
            "failed_by": failure.data.failed_by,
            "error_code": failure.data.error_code,
            "resume": {
                "project_id": "p-1",
                "workflow_instance_id": INSTANCE,
                "started_at": T0,
                "current_phase": "crawl",
                "pages_total": 10,
            },
            "pages_crawled": 4,
        },
    )


def history(by: str) -> tuple[list[object], AuditFailed]:
    failure = (
        operator_failed(when=at(20))
        if by == "operator"
        else failed(when=at(20), by=by, code="instance_lost", reconciled_by="watchdog")
    )
    return [started(when=T0, current_phase="crawl", organization_id="o-1"), failure], failure


@pytest.mark.parametrize("by", ["reconciler", "operator"])
def test_a_failure_auditrec_made_is_restored_to_running_with_its_facts(by: str) -> None:
    # given an audit failed by the reconciler or an operator
    events, failure = history(by)
    before = fold(events)  # type: ignore[arg-type]
    assert before is not None and before.status == "failed"

    # when an operator restores it
    after = evolve(before, restored(failure, when=at(30)))

    # then it runs again, the failure cleared, everything else as it was
    assert after.status == "running"
    assert before.failed_at is not None and before.completed_at is None
    failure_fields = (after.error_code, after.error_detail, after.failed_by, after.failed_at)
    assert failure_fields == (None, None, None, None)
    assert after.completed_at is None
    assert (after.started_at, after.organization_id, after.workflow_instance_id) == (
        T0,
        "o-1",
        INSTANCE,
    )
    assert after.current_phase == "crawl"


def test_a_workflow_failure_is_never_restored() -> None:
    # given an audit the workflow itself reported failed
    events, failure = history("workflow")
    before = fold(events)  # type: ignore[arg-type]
    assert before is not None

    # then the table has no row for a restore, and the event is recorded, not applied
    assert next_status("failed", "AuditRestored", before) is None
    assert evolve(before, restored(failure, when=at(30))) == before


@pytest.mark.parametrize("status", ["running", "completed"])
def test_a_restore_of_an_audit_that_is_not_failed_changes_nothing(status: str) -> None:
    events: list[object] = [started(when=T0)]
    if status == "completed":
        events.append(completed(when=at(5)))
    before = fold(events)  # type: ignore[arg-type]
    assert before is not None
    assert evolve(before, restored(operator_failed(), when=at(30))) == before


def test_a_state_that_kept_nothing_of_the_failed_audit_takes_the_facts_of_the_restore() -> None:
    # given only what a compact consumer keeps of a failed audit: status and who failed it
    compact = AuditState(audit_id=AUDIT, status="failed", failed_by="reconciler")

    # when the restore arrives
    after = evolve(compact, restored(operator_failed(), when=at(30)))

    # then the running audit has what the rules and telemetry need
    assert (after.status, after.started_at, after.workflow_instance_id) == ("running", T0, INSTANCE)
    assert (after.current_phase, after.pages_crawled, after.pages_total) == ("crawl", 4, 10)


def test_a_restored_audit_is_judged_again_and_can_fail_again() -> None:
    # given an audit the reconciler failed, then an operator restored
    events, failure = history("reconciler")
    state = fold([*events, restored(failure, when=at(30))])  # type: ignore[list-item]
    assert state is not None and state.status == "running"

    # when a later probe still finds no instance
    verdict, decision = decide(state, observed("not_found", when=at(40)), POLICY)

    # then the reconciler fails it again, with a new decision
    assert verdict is not None and verdict.rule == "instance_lost"
    assert isinstance(decision, AuditFailed)
    assert decision.data.failed_by.value == "reconciler"
    assert evolve(state, decision).status == "failed"


def test_a_restored_reconciler_failure_is_still_overturned_by_a_completion() -> None:
    events, failure = history("reconciler")
    state = fold([*events, restored(failure, when=at(30)), completed(when=at(35))])  # type: ignore[list-item]
    assert state is not None and state.status == "completed"


def test_replay_names_the_operator_of_a_failure_and_of_a_restore() -> None:
    failure = operator_failed(when=at(20), actor="ops-token")
    steps = explain([started(when=T0), failure, restored(failure, when=at(30))], POLICY)

    assert [(s.before, s.after, s.rule) for s in steps] == [
        ("none", "running", "transition"),
        ("running", "failed", "operator_failed"),
        ("failed", "running", "restored"),
    ]
    assert "by operator ops-token" in steps[1].reason
    assert "undone by alice: alive" in steps[2].reason
    assert "failed_by_reconciler_or_operator" in steps[2].reason


def test_replay_says_why_a_restore_of_a_workflow_failure_was_not_applied() -> None:
    events, failure = history("workflow")
    steps = explain([*events, restored(failure, when=at(30))], POLICY)  # type: ignore[list-item]

    assert (steps[-1].before, steps[-1].after, steps[-1].rule) == (
        "failed",
        "failed",
        "restore_refused",
    )
    assert "by workflow" in steps[-1].reason and "alice" in steps[-1].reason


def test_a_restore_is_a_valid_envelope_that_survives_json() -> None:
    event = restored(operator_failed(), when=at(30))
    again = AuditRestored.model_validate_json(event.model_dump_json())
    assert again == event
    assert isinstance(again.data.failure_id, uuid.UUID)


# --- over arbitrary histories ------------------------------------------------------------------

STEPS = st.lists(
    st.sampled_from(
        ["workflow", "reconciler", "operator", "restore", "complete", "errored", "running"]
    ),
    max_size=14,
)


def history_of(steps: list[str]) -> list[AuditEvent]:
    events: list[AuditEvent] = [started(when=T0)]
    last: AuditFailed = operator_failed()  # what a restore names before any failure
    for i, step in enumerate(steps, start=1):
        when = at(minutes=10 * i)
        if step in ("workflow", "reconciler", "operator"):
            last = (
                operator_failed(when=when)
                if step == "operator"
                else failed(when=when, by=step, code="oom")
            )
            events.append(last)
        elif step == "restore":
            events.append(restored(last, when=when))
        elif step == "complete":
            events.append(completed(when=when))
        else:
            events.append(observed(step, when=when, error="Worker exceeded memory limit"))
    return events


@settings(max_examples=150, deadline=None)
@given(STEPS)
def test_only_a_restore_of_a_failure_auditrec_made_returns_an_audit_to_running(
    steps: list[str],
) -> None:
    state = AuditState(audit_id=AUDIT)
    for event in history_of(steps):
        after = evolve(state, event)
        if state.status in TERMINAL and after.status == "running":
            assert isinstance(event, AuditRestored)
            assert state.status == "failed" and state.failed_by in ("reconciler", "operator")
            assert after.failed_by is None and after.error_code is None
        if state.status == "completed":
            assert after.status == "completed"  # a completed audit is never restored
        state = after
