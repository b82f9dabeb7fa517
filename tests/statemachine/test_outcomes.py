"""The outcome feed's entries: which changes of an audit are outcomes, and what each says."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from statemachine.events import (
    AuditEvent,
    AuditFailed,
    AuditFailureDiscarded,
    AuditFailureHeld,
    AuditFailureReleased,
    HeldRelease,
)
from statemachine.outcomes import OUTCOME_TYPES, Outcome, outcome, outcome_id
from statemachine.policy import Policy
from statemachine.rules import decide
from statemachine.state import AuditState, evolve
from tests.statemachine.sm_builders import (
    AUDIT,
    at,
    completed,
    failed,
    observed,
    progressed,
    running,
    started,
)
from tests.statemachine.test_restore import restored

POLICY = Policy(instance_lost_grace=timedelta(0))


def step(state: AuditState, event: AuditEvent) -> tuple[AuditState, Outcome | None]:
    after = evolve(state, event)
    return after, outcome(state, event, after)


def test_a_reconciler_failure_says_its_code_rule_and_who_asked() -> None:
    _, decision = decide(
        running(), observed("errored", when=at(30), error="Exceeded Memory Limit"), POLICY
    )
    assert isinstance(decision, AuditFailed)

    after, entry = step(running(), decision)

    assert entry is not None and after.status == "failed"
    assert (entry.type, entry.status, entry.error_code, entry.rule) == (
        "audit.failed", "failed", "oom", "errored",
    )  # fmt: skip
    assert (entry.reconciled_by, entry.actor) == ("watchdog", "reconciler")
    assert (entry.decided_at, entry.event_id) == (decision.occurred_at, decision.event_id)
    assert entry.id == outcome_id(AUDIT, decision.event_id) and entry.id.startswith("out_")


def test_the_workflows_own_failure_completion_overturn_and_restore_are_outcomes() -> None:
    own = failed(code="oom", by="workflow")
    _, entry = step(running(), own)
    assert entry is not None and (entry.type, entry.actor, entry.rule) == (
        "audit.failed", "workflow", None,
    )  # fmt: skip

    _, done = step(running(), completed(when=at(40)))
    assert done is not None and (done.type, done.status, done.error_code) == (
        "audit.completed", "completed", None,
    )  # fmt: skip

    decided = failed(code="instance_lost", by="reconciler", reconciled_by="subscription")
    failed_state, _ = step(running(), decided)
    _, overturned = step(failed_state, completed(when=at(50)))
    assert overturned is not None and (overturned.type, overturned.status) == (
        "audit.overturned", "completed",
    )  # fmt: skip

    undo = restored(decided, actor="token:ops")
    _, back = step(failed_state, undo)
    assert back is not None and (back.type, back.status, back.actor) == (
        "audit.restored", "running", "token:ops",
    )  # fmt: skip


def test_a_held_decision_its_release_and_its_discard_are_outcomes() -> None:
    lost = observed("not_found", when=at(30))
    _, held = decide(running(), lost, POLICY, brake_engaged=True)
    assert isinstance(held, AuditFailureHeld)

    holding, entry = step(running(), held)
    assert entry is not None and (entry.type, entry.status, entry.error_code, entry.rule) == (
        "audit.failure_held", "running", "instance_lost", "instance_lost",
    )  # fmt: skip
    assert entry.actor == "reconciler"

    ended = HeldRelease(held_id=held.event_id, actor="cli:ops", reason="the API was down")
    envelope = {"audit_id": AUDIT, "occurred_at": at(40), "producer": "auditrec-brake"}
    release = AuditFailureReleased(event_id=uuid.uuid4(), data=ended, **envelope)
    discard = AuditFailureDiscarded(event_id=uuid.uuid4(), data=ended, **envelope)
    for event, kind in ((release, "audit.failure_released"), (discard, "audit.failure_discarded")):
        after, entry = step(holding, event)
        assert entry is not None and (entry.type, entry.status, entry.actor) == (
            kind, "running", "cli:ops",
        )  # fmt: skip
        assert after.held_decision_id is None
        # a second release of the same hold changes nothing: no outcome
        assert step(after, event)[1] is None


@pytest.mark.parametrize(
    "event",
    [
        started(),
        progressed(crawled=10),
        observed("running", when=at(10)),
    ],
    ids=["started", "progressed", "observed"],
)
def test_what_changes_no_status_is_no_outcome(event: AuditEvent) -> None:
    before = running() if event.type != "AuditStarted" else AuditState(AUDIT)
    assert step(before, event)[1] is None


def test_a_failure_of_an_audit_failed_already_is_no_outcome() -> None:
    failed_state, first = step(running(), failed(code="oom"))
    assert first is not None
    assert step(failed_state, failed(code="cpu_limit"))[1] is None


def test_the_same_change_is_the_same_entry_and_every_type_is_listed() -> None:
    decision = failed(code="oom")
    one, two = step(running(), decision)[1], step(running(), decision)[1]
    assert one == two and one is not None
    other = failed(code="oom")
    assert step(running(), other)[1] != one
    assert outcome_id("a-1", decision.event_id) != outcome_id("a-2", decision.event_id)
    assert set(OUTCOME_TYPES) == {
        "audit.failed", "audit.completed", "audit.overturned", "audit.restored",
        "audit.failure_held", "audit.failure_released", "audit.failure_discarded",
    }  # fmt: skip


def test_a_hold_the_instance_s_return_ends_is_a_discard_without_an_actor() -> None:
    lost = observed("not_found", when=at(30))
    _, held = decide(running(), lost, POLICY, brake_engaged=True)
    assert isinstance(held, AuditFailureHeld)
    holding, _ = step(running(), held)
    found = observed("running", when=at(35))
    after, entry = step(holding, found)
    assert after.held_decision_id is None and after.status == "running"
    assert entry is not None and (entry.type, entry.status, entry.actor, entry.event_id) == (
        "audit.failure_discarded", "running", None, found.event_id,
    )  # fmt: skip
