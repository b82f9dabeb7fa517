"""The reconciler's rules 1–8 (DESIGN §4) through ``judge`` and ``decide``."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from statemachine.events import (
    AuditFailed,
    AuditFailureSimulated,
    Notice,
    WorkflowError,
    derived_id,
)
from statemachine.explain import explain
from statemachine.policy import Policy, format_duration, parse_duration
from statemachine.rules import PRODUCER, decide, judge
from statemachine.state import AuditState, evolve, fold
from statemachine.vocabulary import HEALTHY_STATUSES
from tests.statemachine.sm_builders import (
    AUDIT,
    INSTANCE,
    T0,
    TERMINAL_HISTORIES,
    at,
    attached,
    completed,
    observed,
    probe_failed,
    progressed,
    running,
    started,
    state_of,
)

POLICY = Policy()
GRACE = timedelta(minutes=10)  # INSTANCE_LOST_GRACE and FINALIZE_GRACE defaults
EVIDENCE_THRESHOLDS = {
    "stale_running_after_s": 900.0,
    "instance_lost_grace_s": 600.0,
    "finalize_grace_s": 600.0,
    "brake_min_audits": 20,
    "brake_min_share": 0.5,
}


def test_the_default_policy_is_the_design_defaults() -> None:
    assert POLICY.stale_running_after == timedelta(minutes=15)
    assert POLICY.instance_lost_grace == GRACE
    assert POLICY.finalize_grace == GRACE
    assert POLICY.shadow is False


# --- rule 1: stale instance ----------------------------------------------------------------------


@pytest.mark.parametrize("status", ["errored", "terminated", "not_found", "complete"])
def test_an_observation_of_another_instance_is_ignored(status: str) -> None:
    # given a running audit on wf-1, long past every grace
    state = running()

    # when a deadly-looking observation of wf-old arrives
    obs = observed(status, when=at(120), instance="wf-old", error="Execution timed out")
    verdict, decision = decide(state, obs, POLICY)

    # then it is stale: no failure, no decision
    assert verdict is not None
    assert verdict.rule == "stale_instance"
    assert verdict.failure is None
    assert decision is None
    assert "'wf-old'" in verdict.reason and "'wf-1'" in verdict.reason


def test_an_observation_of_the_instance_before_a_reattach_is_stale() -> None:
    # given the audit moved on to wf-2
    state = evolve(running(), attached("wf-2", when=at(2)))

    # when a late observation of wf-1 says errored
    verdict, decision = decide(state, observed("errored", when=at(3), instance=INSTANCE), POLICY)

    # then it is ignored, and the stale observation does not touch the state either
    assert verdict is not None and verdict.rule == "stale_instance"
    assert decision is None
    assert evolve(state, observed("errored", when=at(3), instance=INSTANCE)) == state


def test_a_not_attached_observation_after_an_attach_is_stale() -> None:
    state = evolve(state_of(started(instance=None)), attached("wf-2", when=at(1)))

    verdict, decision = decide(state, observed("not_attached", when=at(60), instance=None), POLICY)

    assert verdict is not None and verdict.rule == "stale_instance"
    assert decision is None


# --- rule 2: errored -----------------------------------------------------------------------------


def test_errored_with_a_known_error_fails_with_the_classified_code() -> None:
    # given a running audit in the crawl phase
    state = running(phase="crawl")

    # when the instance is seen errored with a timeout
    error = {"name": "WorkflowTimeoutError", "message": "Execution timed out after 1000ms"}
    verdict, decision = decide(state, observed("errored", when=at(3), error=error), POLICY)

    # then the audit fails step_timeout with the error as detail
    assert verdict is not None and verdict.rule == "errored"
    assert isinstance(decision, AuditFailed)
    d = decision.data
    assert d.error_code == "step_timeout"
    assert d.error_detail == "WorkflowTimeoutError: Execution timed out after 1000ms"
    assert d.failed_by.value == "reconciler"
    assert d.reconciled_by is not None and d.reconciled_by.value == "watchdog"
    assert d.workflow_status == "errored"
    assert d.failed_phase == "crawl"
    assert verdict.failure == d
    assert verdict.reason.endswith("→ failed step_timeout")


def test_errored_with_an_unknown_error_fails_unknown_with_the_message() -> None:
    verdict, decision = decide(
        running(), observed("errored", when=at(3), error="TypeError: x is undefined"), POLICY
    )

    assert verdict is not None and verdict.rule == "errored"
    assert decision is not None
    assert decision.data.error_code == "unknown"
    assert decision.data.error_detail == "TypeError: x is undefined"


@pytest.mark.parametrize("error", [None, "", WorkflowError()], ids=["none", "empty", "no-fields"])
def test_errored_without_an_error_payload_fails_unknown_workflow_instance_errored(error) -> None:
    verdict, decision = decide(running(), observed("errored", when=at(3), error=error), POLICY)

    assert verdict is not None
    assert verdict.reason == "errored (no error payload) → failed unknown"
    assert decision is not None
    assert decision.data.error_code == "unknown"
    assert decision.data.error_detail == "Workflow instance errored"
    assert "error" not in (decision.data.policy or {})


def test_errored_fails_even_a_brand_new_audit() -> None:
    _, decision = decide(running(), observed("errored", when=T0), POLICY)

    assert decision is not None and decision.data.error_code == "unknown"


# --- rule 3: terminated ---------------------------------------------------------------------------


def test_terminated_without_a_specific_error_fails_workflow_terminated() -> None:
    verdict, decision = decide(running(), observed("terminated", when=at(3)), POLICY)

    assert verdict is not None and verdict.rule == "terminated"
    assert verdict.reason == "terminated → failed workflow_terminated"
    assert decision is not None
    assert decision.data.error_code == "workflow_terminated"
    assert decision.data.error_detail == "Workflow instance was terminated"
    assert decision.data.workflow_status == "terminated"


def test_terminated_with_an_unmatched_error_fails_workflow_terminated_with_the_message() -> None:
    _, decision = decide(
        running(), observed("terminated", when=at(3), error="Terminated by user"), POLICY
    )

    assert decision is not None
    assert decision.data.error_code == "workflow_terminated"
    assert decision.data.error_detail == "Terminated by user"


def test_terminated_with_a_specific_error_fails_with_the_classified_code() -> None:
    _, decision = decide(
        running(),
        observed("terminated", when=at(3), error={"message": "Worker exceeded CPU time limit."}),
        POLICY,
    )

    assert decision is not None
    assert decision.data.error_code == "cpu_limit"
    assert decision.data.error_detail == "Worker exceeded CPU time limit."


# --- rules 4 and 5: not_found, not_attached -------------------------------------------------------


def test_not_found_younger_than_the_grace_is_no_change() -> None:
    # given an audit started at T0
    # when its instance is not found one second before the grace ends
    verdict, decision = decide(
        running(), observed("not_found", when=T0 + GRACE - timedelta(seconds=1)), POLICY
    )

    # then nothing happens yet
    assert verdict is not None and verdict.rule == "instance_lost"
    assert verdict.failure is None and decision is None
    assert verdict.reason == "not_found, age 9m59s < grace 10m → no change"


@pytest.mark.parametrize("age", [GRACE, GRACE + timedelta(hours=5)], ids=["at-grace", "later"])
def test_not_found_at_or_after_the_grace_fails_instance_lost(age: timedelta) -> None:
    verdict, decision = decide(running(), observed("not_found", when=T0 + age), POLICY)

    assert verdict is not None and verdict.rule == "instance_lost"
    assert decision is not None
    assert decision.data.error_code == "instance_lost"
    assert decision.data.error_detail == "Workflow instance was not found"
    assert decision.data.workflow_status == "not_found"
    if age == GRACE:
        assert verdict.reason == "not_found, age 10m ≥ grace 10m → failed instance_lost"


def test_the_age_counts_from_started_at_not_from_the_first_event() -> None:
    # given an audit whose AuditStarted arrived 9 minutes after it actually started
    state = state_of(started(when=at(9), started_at=T0))

    # when the instance is not found at T0 + grace
    _, decision = decide(state, observed("not_found", when=T0 + GRACE), POLICY)

    # then the grace is over
    assert decision is not None and decision.data.error_code == "instance_lost"


def test_the_grace_comes_from_the_policy() -> None:
    policy = Policy(instance_lost_grace=timedelta(minutes=2))

    _, early = decide(running(), observed("not_found", when=at(1, 59)), policy)
    _, late = decide(running(), observed("not_found", when=at(2)), policy)

    assert early is None
    assert late is not None
    assert late.data.policy is not None
    assert late.data.policy["instance_lost_grace_s"] == 120.0


def test_never_attached_younger_than_the_grace_is_no_change() -> None:
    state = state_of(started(instance=None))

    verdict, decision = decide(
        state,
        observed("not_attached", when=T0 + GRACE - timedelta(seconds=1), instance=None),
        POLICY,
    )

    assert verdict is not None and verdict.rule == "never_attached"
    assert verdict.failure is None and decision is None


def test_never_attached_at_the_grace_fails_instance_lost() -> None:
    state = state_of(started(instance=None, current_phase="queue"))

    verdict, decision = decide(
        state, observed("not_attached", when=T0 + GRACE, instance=None, trigger="on_demand"), POLICY
    )

    assert verdict is not None and verdict.rule == "never_attached"
    assert decision is not None
    assert decision.data.error_code == "instance_lost"
    assert decision.data.error_detail == "Workflow instance was never attached"
    assert decision.data.workflow_status == "not_attached"
    assert decision.data.failed_phase == "queue"
    assert decision.data.reconciled_by is not None
    assert decision.data.reconciled_by.value == "on_demand"


# --- rule 6: complete while still running ---------------------------------------------------------


def test_complete_with_an_end_time_at_least_the_finalize_grace_ago_fails_finalize_lost() -> None:
    # given a running audit
    # when the instance is seen complete, having ended exactly FINALIZE_GRACE ago
    obs = observed("complete", when=at(30), ended=at(30) - GRACE)
    verdict, decision = decide(running(), obs, POLICY)

    # then the completion was lost
    assert verdict is not None and verdict.rule == "finalize_lost"
    assert decision is not None
    assert decision.data.error_code == "finalize_lost"
    assert decision.data.error_detail == "Workflow completed but the audit was never finalized"
    assert decision.data.workflow_status == "complete"
    assert decision.data.policy is not None
    assert decision.data.policy["workflow_ended_at"] == (at(30) - GRACE).isoformat()


def test_complete_with_an_end_time_inside_the_finalize_grace_is_no_change() -> None:
    obs = observed("complete", when=at(30), ended=at(30) - GRACE + timedelta(seconds=1))
    verdict, decision = decide(running(), obs, POLICY)

    assert verdict is not None and verdict.rule == "finalize_pending"
    assert verdict.failure is None and decision is None
    assert "ended 9m59s ago < finalize grace 10m" in verdict.reason


def test_without_an_end_time_the_first_complete_observation_starts_the_finalize_grace() -> None:
    # given a running audit first seen complete at t=20m (no end time reported)
    state = running()
    first = observed("complete", when=at(20))
    verdict, decision = decide(state, first, POLICY)
    assert verdict is not None and verdict.rule == "finalize_pending"
    assert decision is None
    state = evolve(state, first)
    assert state.instance_ended_at == at(20)
    assert state.status == "running"

    # when it is seen complete again one second before the grace ends
    almost = observed("complete", when=at(30) - timedelta(seconds=1))
    verdict, decision = decide(state, almost, POLICY)
    assert verdict is not None and verdict.rule == "finalize_pending"
    assert decision is None
    state = evolve(state, almost)
    assert state.instance_ended_at == at(20)  # the first observation is remembered

    # and then exactly FINALIZE_GRACE after the first complete observation
    verdict, decision = decide(state, observed("complete", when=at(30)), POLICY)

    # then the completion was lost
    assert verdict is not None and verdict.rule == "finalize_lost"
    assert decision is not None and decision.data.error_code == "finalize_lost"


def test_a_restarted_instance_starts_the_finalize_grace_again() -> None:
    # given the instance was seen complete, then running again (a user restart)
    state = running()
    for event in (observed("complete", when=at(20)), observed("running", when=at(25))):
        state = evolve(state, event)
    assert state.instance_ended_at is None

    # when it is seen complete 10 minutes after the first completion
    verdict, decision = decide(state, observed("complete", when=at(30)), POLICY)

    # then the grace counts from the new completion
    assert verdict is not None and verdict.rule == "finalize_pending"
    assert decision is None


def test_a_probe_failure_does_not_reset_the_finalize_grace() -> None:
    state = running()
    for event in (observed("complete", when=at(20)), probe_failed(when=at(25))):
        state = evolve(state, event)

    _, decision = decide(state, observed("complete", when=at(30)), POLICY)

    assert decision is not None and decision.data.error_code == "finalize_lost"


def test_the_completion_arriving_in_the_grace_completes_the_audit() -> None:
    state = evolve(running(), observed("complete", when=at(20)))

    state = evolve(state, completed(when=at(21), crawled=10))

    assert state.status == "completed"
    assert state.overturned is False
    verdict, decision = decide(state, observed("complete", when=at(40)), POLICY)
    assert verdict is not None and verdict.rule == "not_running" and decision is None


# --- rule 7: healthy ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "status",
    ["queued", "running", "paused", "waiting", "waitingForPause", "rollingBack", "unknown"],
)
def test_a_healthy_status_never_fails_the_audit_however_old(status: str) -> None:
    verdict, decision = decide(running(), observed(status, when=at(60 * 24 * 10)), POLICY)

    assert verdict is not None and verdict.rule == "healthy"
    assert verdict.failure is None and decision is None
    assert verdict.reason == f"{status}, age 240h → healthy, no change"
    assert status in HEALTHY_STATUSES


@pytest.mark.parametrize("status", ["errored", "terminated", "complete", "not_found"])
def test_a_listing_alone_never_fails_an_audit(status: str) -> None:
    listed = observed(status, when=at(60 * 24), ended=at(60), source="listing")
    verdict, decision = decide(running(), listed, POLICY)

    assert verdict is not None and verdict.rule == "listing_only"
    assert verdict.failure is None and decision is None
    assert verdict.reason.startswith(f"listed {status} → no change")


@pytest.mark.parametrize("status", ["errored", "terminated", "complete", "not_found"])
def test_a_subscription_message_alone_never_fails_an_audit(status: str) -> None:
    reported = observed(status, when=at(60 * 24), ended=at(60), source="subscription")
    verdict, decision = decide(running(), reported, POLICY)

    assert verdict is not None and verdict.rule == "subscription_only"
    assert verdict.failure is None and decision is None
    assert verdict.reason.startswith(f"reported {status} by the event subscription → no change")


def test_a_failure_confirmed_for_the_subscription_is_reconciled_by_it_with_the_notice() -> None:
    notice = {"message_id": "m-1", "event": "cf.workflows.workflow.instance.errored", "at": at(5)}
    confirmed = observed("errored", when=at(6), ended=at(5), trigger="subscription")
    confirmed = confirmed.model_copy(
        update={"data": confirmed.data.model_copy(update={"notice": Notice(**notice)})}
    )
    _verdict, decision = decide(running(), confirmed, POLICY)

    assert isinstance(decision, AuditFailed)
    assert decision.data.reconciled_by == "subscription"
    assert decision.data.policy is not None
    assert decision.data.policy["reported_at"] == at(5).isoformat()
    assert decision.data.policy["message_id"] == "m-1"


def test_a_listed_alive_status_is_healthy_like_the_instance_said_it() -> None:
    verdict, decision = decide(running(), observed("running", source="listing"), POLICY)

    assert verdict is not None and (verdict.rule, decision) == ("healthy", None)


def test_a_healthy_observation_is_recorded_as_last_seen() -> None:
    state = evolve(running(), observed("queued", when=at(7)))

    assert state.status == "running"
    assert state.last_observed_status == "queued"
    assert state.last_observed_at == at(7)


# --- rule 8: probe failures -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "reason",
    [
        "timeout",
        "network",
        "rate_limited",
        "unauthorized",
        "server_error",
        "workflow_not_found",
        "invalid_response",
    ],
)
def test_a_probe_failure_never_changes_the_audit(reason: str) -> None:
    # given a running audit long past every grace
    state = running(phase="crawl")

    # when the probe fails
    event = probe_failed(when=at(600), reason=reason)
    verdict, decision = decide(state, event, POLICY)
    after = evolve(state, event)

    # then no decision, and only "last observed" moves
    assert verdict is not None and verdict.rule == "probe_failed"
    assert verdict.reason == f"probe failed ({reason}): probe gave up → no change"
    assert decision is None
    assert after.status == "running"
    assert (after.current_phase, after.pages_crawled, after.error_code) == ("crawl", 3, None)
    assert after.last_observed_status == "probe_failed"
    assert after.last_observed_at == at(600)


@pytest.mark.parametrize("history", list(TERMINAL_HISTORIES), ids=str)
def test_a_probe_failure_never_changes_a_terminal_audit(history: str) -> None:
    state = state_of(*TERMINAL_HISTORIES[history])

    verdict, decision = decide(state, probe_failed(when=at(600)), POLICY)

    assert verdict is not None and verdict.rule == "probe_failed" and decision is None
    assert evolve(state, probe_failed(when=at(600))).status == state.status


# --- what the rules do not judge ------------------------------------------------------------------


@pytest.mark.parametrize("history", list(TERMINAL_HISTORIES), ids=str)
@pytest.mark.parametrize("status", ["errored", "terminated", "not_found", "complete"])
def test_observations_of_a_terminal_audit_are_ignored(history: str, status: str) -> None:
    state = state_of(*TERMINAL_HISTORIES[history])

    verdict, decision = decide(state, observed(status, when=at(600), ended=at(1)), POLICY)

    assert verdict is not None and verdict.rule == "not_running"
    assert verdict.reason == f"audit is already {state.status} → ignored"
    assert decision is None


@pytest.mark.parametrize("state", [None, AuditState(audit_id=AUDIT)], ids=["none", "empty"])
def test_an_observation_of_an_audit_never_started_is_ignored(state) -> None:
    verdict, decision = decide(state, observed("errored", when=at(600)), POLICY)

    assert verdict is not None and verdict.rule == "unknown_audit"
    assert decision is None


@pytest.mark.parametrize(
    "event",
    [started(), attached("wf-2"), progressed(phase="x"), completed()],
    ids=lambda e: e.type,
)
def test_only_observations_and_probe_failures_are_judged(event) -> None:
    assert judge(running(), event, POLICY) is None
    assert decide(running(), event, POLICY) == (None, None)


# --- the decision event ---------------------------------------------------------------------------


def _deadly(**kwargs) -> tuple:
    obs = observed(
        "errored",
        when=at(12),
        error={"name": "Error", "message": "D1_ERROR: no such table"},
        **kwargs,
    )
    return obs, decide(running(phase="analysis"), obs, POLICY)


def test_the_decision_id_derives_from_the_observation_and_is_stable() -> None:
    # given one observation, delivered twice
    obs, (_, first) = _deadly(event_id=uuid.UUID(int=42))
    _, second = decide(running(phase="analysis"), obs, POLICY)

    # then both deliveries yield the same decision
    assert first is not None
    assert first == second
    assert first.event_id == derived_id(obs.event_id, "reconciler-decision")
    assert first.event_id == derived_id(str(uuid.UUID(int=42)), "reconciler-decision")


def test_different_observations_yield_different_decision_ids() -> None:
    _, (_, a) = _deadly()
    _, (_, b) = _deadly()

    assert a is not None and b is not None
    assert a.event_id != b.event_id
    assert a.data.policy is not None and b.data.policy is not None
    assert {**a.data.policy, "observation_id": None} == {**b.data.policy, "observation_id": None}


def test_the_decision_is_caused_by_the_observation_and_keeps_its_correlation() -> None:
    correlation = uuid.UUID(int=7)
    obs, (_, decision) = _deadly(causation_id=uuid.UUID(int=6), correlation_id=correlation)

    assert decision is not None
    assert decision.causation_id == obs.event_id
    assert decision.correlation_id == correlation
    assert decision.audit_id == AUDIT
    assert decision.producer == PRODUCER == "auditrec-reconciler"
    assert decision.occurred_at == obs.data.observed_at == at(12)
    assert decision.schema_version == 2
    assert decision.data.rule == "errored"
    assert decision.type == "AuditFailed"


def test_the_failed_phase_is_the_current_phase_at_decision_time() -> None:
    # given an audit that moved to analysis
    _, (_, decision) = _deadly()

    # then the failure names analysis, and folding it records that
    assert decision is not None
    assert decision.data.failed_phase == "analysis"
    state = evolve(running(phase="analysis"), decision)
    assert state.status == "failed"
    assert (state.failed_phase, state.failed_by, state.reconciled_by) == (
        "analysis",
        "reconciler",
        "watchdog",
    )
    assert state.error_code == "db_error"


def test_the_decision_carries_the_evidence_and_the_thresholds_in_force() -> None:
    obs, (_, decision) = _deadly()

    assert decision is not None
    assert decision.data.workflow_status == "errored"
    assert decision.data.policy == {
        **EVIDENCE_THRESHOLDS,
        "mode": "enforce",
        "trigger": "watchdog",
        "observed_at": at(12).isoformat(),
        "observation_id": str(obs.event_id),
        "error": "Error: D1_ERROR: no such table",
        "workflow_instance_id": INSTANCE,
    }


def test_the_detail_is_truncated_to_500_characters() -> None:
    message = "Execution timed out " + "x" * 1900
    _, decision = decide(
        running(), observed("errored", when=at(3), error={"name": "E", "message": message}), POLICY
    )

    assert decision is not None
    detail = decision.data.error_detail
    assert len(detail) == 500
    assert detail.startswith("E: Execution timed out xxx")
    assert detail.endswith("…")
    assert decision.data.error_code == "step_timeout"
    assert decision.data.policy is not None
    assert len(decision.data.policy["error"]) == 500
    # the decision re-validates as a contract event
    assert AuditFailed.model_validate(decision.model_dump()) == decision


def test_a_manual_probe_is_reconciled_on_demand() -> None:
    _, decision = decide(running(), observed("errored", when=at(3), trigger="manual"), POLICY)

    assert decision is not None
    assert decision.data.reconciled_by is not None
    assert decision.data.reconciled_by.value == "on_demand"
    assert decision.data.policy is not None and decision.data.policy["trigger"] == "manual"


def test_a_completion_after_the_reconcilers_failure_overturns_it() -> None:
    # given the reconciler failed the audit for a lost finalize
    state = evolve(running(), observed("complete", when=at(20)))
    _, decision = decide(state, observed("complete", when=at(30)), POLICY)
    assert decision is not None
    state = fold([decision], state)
    assert state is not None and state.status == "failed"

    # when the late AuditCompleted arrives
    state = evolve(state, completed(when=at(31), crawled=10))

    # then the failure is overturned
    assert state.status == "completed" and state.overturned is True
    assert state.error_code is None


# --- shadow mode ---------------------------------------------------------------------------------


def test_shadow_mode_records_the_failure_it_would_have_made_without_making_it() -> None:
    # given shadow mode
    shadow = Policy(shadow=True)
    state = running(phase="crawl")
    obs = observed("errored", when=at(3), error="Worker exceeded CPU time limit.")

    # when an observation would fail the audit
    verdict, decision = decide(state, obs, shadow)
    _, enforced = decide(state, obs, POLICY)

    # then a simulated failure is emitted, with the same data but for the mode
    assert verdict is not None and verdict.failure is not None
    assert isinstance(decision, AuditFailureSimulated)
    assert enforced is not None
    assert decision.event_id == enforced.event_id
    assert decision.causation_id == obs.event_id
    assert decision.data.error_code == "cpu_limit"
    assert decision.data.policy is not None and enforced.data.policy is not None
    assert decision.data.policy["mode"] == "shadow"
    assert decision.data.model_copy(update={"policy": None}) == enforced.data.model_copy(
        update={"policy": None}
    )

    # and folding it keeps the audit running, untouched
    after = fold([obs, decision], state)
    assert after is not None
    assert after.status == "running"
    assert after.error_code is None and after.failed_by is None
    assert after == evolve(state, obs)


def test_shadow_mode_makes_no_decision_where_enforcement_makes_none() -> None:
    verdict, decision = decide(running(), observed("running", when=at(3)), Policy(shadow=True))

    assert verdict is not None and verdict.rule == "healthy"
    assert decision is None


# --- the policy's durations -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("15m", timedelta(minutes=15)),
        ("90s", timedelta(seconds=90)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("250ms", timedelta(milliseconds=250)),
        ("1d", timedelta(days=1)),
        (" 2H ", timedelta(hours=2)),
        ("600", timedelta(minutes=10)),
        (30, timedelta(seconds=30)),
        (timedelta(minutes=3), timedelta(minutes=3)),
        ("36525d", timedelta(days=36525)),
    ],
    ids=repr,
)
def test_a_duration_is_read_from_units_or_seconds(text: object, expected: timedelta) -> None:
    assert parse_duration(text) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    ["", "abc", "5x", "1h 30m", "-5s", -1, True, "36526d", "99999999999d", "inf", "nan", 1e300],
    ids=repr,
)
def test_a_bad_duration_is_refused(text: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(minutes=8, seconds=12), "8m12s"),
        (timedelta(minutes=10), "10m"),
        (timedelta(seconds=-3), "-3s"),
        (timedelta(milliseconds=250), "250ms"),
        (timedelta(hours=1, seconds=1), "1h0m1s"),
    ],
    ids=str,
)
def test_a_duration_is_written_compactly(delta: timedelta, text: str) -> None:
    assert format_duration(delta) == text


# --- explain --------------------------------------------------------------------------------------


def test_explain_tells_each_step_of_an_overturned_audit() -> None:
    # given the reconciler failed an audit whose completion then arrived
    obs_first = observed("complete", when=at(20))
    obs_late = observed("complete", when=at(30))
    state = evolve(running(), obs_first)
    _, decision = decide(state, obs_late, POLICY)
    assert decision is not None
    history = [
        started(),
        obs_first,
        obs_late,
        decision,
        completed(when=at(31)),
        started(when=at(32)),
    ]

    # when it is explained
    steps = explain(history, POLICY)

    # then each step names its transition and rule
    assert [(s.before, s.after, s.rule) for s in steps] == [
        ("none", "running", "transition"),
        ("running", "running", "finalize_pending"),
        ("running", "running", "finalize_lost"),
        ("running", "failed", "finalize_lost"),
        ("failed", "completed", "transition"),
        ("completed", "completed", "recorded"),
    ]
    assert steps[3].reason == (
        "failed finalize_lost by reconciler: Workflow completed but the audit was never finalized"
    )
    assert steps[4].reason.endswith("[failed_by_reconciler]")
    assert steps[5].reason == "second AuditStarted for a known audit → recorded, not applied"
    assert steps[2].as_dict()["type"] == "WorkflowStatusObserved"


# --- explanations keep the policy of their time -------------------------------------------------


def _lost_at_12_minutes() -> list:
    obs = observed("not_found", when=at(12))
    _, decision = decide(running(), obs, POLICY)  # decided under the 10m grace
    assert decision is not None
    return [started(), obs, decision]


def test_a_recorded_decision_is_explained_with_the_policy_it_recorded() -> None:
    # given an audit failed instance_lost under a 10 minute grace
    history = _lost_at_12_minutes()
    before = explain(history, POLICY)

    # when the grace is raised to an hour and the history is explained again
    after = explain(history, Policy(instance_lost_grace=timedelta(hours=1)))

    # then the explanation is unchanged: the decision's own thresholds explain it
    assert after == before
    assert after[1].rule == "instance_lost"
    assert "≥ grace 10m" in after[1].reason
    assert (after[2].rule, after[2].after) == ("instance_lost", "failed")


def test_an_observation_that_led_to_no_decision_says_so_when_todays_policy_would_fail() -> None:
    # given an audit observed not_found at 12 minutes while the grace was longer: no decision
    history = [started(), observed("not_found", when=at(12))]

    # when explained under today's shorter grace
    steps = explain(history, POLICY)

    # then the step tells today's verdict, and that nothing was decided then
    assert steps[1].rule == "instance_lost"
    assert "no decision was recorded" in steps[1].reason
    assert steps[1].after == "running"
