"""A verdict's reason is made when it is read: what replay, explain, backtests and the decision
log read is, character for character, the reason the rules formatted eagerly before — for every
rule, under any policy, and for the reasons ``decide`` composes (a held decision, a second one
refused while a hold is pending)."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from statemachine.classifier import classify, error_text, truncate
from statemachine.events import AuditEvent, WorkflowProbeFailed, WorkflowStatusObserved
from statemachine.policy import Policy, format_duration
from statemachine.rules import Verdict, decide, hold_reason, judge
from statemachine.state import AuditState, initial
from statemachine.vocabulary import HEALTHY_STATUSES, HELD_ERROR_CODES, OBSERVED_STATUSES
from tests.statemachine.sm_builders import AUDIT, T0, at, completed, observed, probe_failed, running


def _fails(policy: Policy, code: str) -> str:
    return f"would fail {code} (shadow mode)" if policy.shadow else f"failed {code}"


def eager(state: AuditState | None, event: AuditEvent, policy: Policy) -> tuple[str, str] | None:
    """The rule and reason as the rules formatted them eagerly (their code before reasons were
    made on demand, kept verbatim as the reference)."""
    if isinstance(event, WorkflowProbeFailed):
        return (
            "probe_failed",
            f"probe failed ({event.data.reason.value}): {event.data.detail} → no change",
        )
    if not isinstance(event, WorkflowStatusObserved):
        return None
    d = event.data
    if state is None or not state.exists:
        return ("unknown_audit", "observation for an audit never started → ignored")
    if state.status != "running":
        return ("not_running", f"audit is already {state.status} → ignored")
    if d.workflow_instance_id != state.workflow_instance_id:
        return (
            "stale_instance",
            f"observed instance {d.workflow_instance_id!r} is not the audit's current "
            f"{state.workflow_instance_id!r} → ignored",
        )
    assert state.started_at is not None
    age = d.observed_at - state.started_at
    grace = policy.instance_lost_grace
    status = d.status
    if d.source == "listing" and status not in HEALTHY_STATUSES:
        return (
            "listing_only",
            f"listed {status} → no change (a listing alone never fails an audit: the "
            "instance is asked for alone)",
        )
    if d.source == "subscription" and status not in HEALTHY_STATUSES:
        return (
            "subscription_only",
            f"reported {status} by the event subscription → no change (a message alone "
            "never fails an audit: the instance is asked for alone)",
        )
    if status == "errored":
        text = error_text(d.error)
        code = classify(text) or "unknown"
        return (
            "errored",
            f"errored ({truncate(text, 200) if text else 'no error payload'})"
            f" → {_fails(policy, code)}",
        )
    if status == "terminated":
        text = error_text(d.error)
        code = classify(text) or "workflow_terminated"
        return (
            "terminated",
            f"terminated{f' ({truncate(text, 200)})' if text else ''} → {_fails(policy, code)}",
        )
    if status in ("not_found", "not_attached"):
        rule = "instance_lost" if status == "not_found" else "never_attached"
        if age >= grace:
            return (
                rule,
                f"{status}, age {format_duration(age)} ≥ grace {format_duration(grace)}"
                f" → {_fails(policy, 'instance_lost')}",
            )
        return (
            rule,
            f"{status}, age {format_duration(age)} < grace {format_duration(grace)} → no change",
        )
    if status == "complete":
        ended = d.workflow_ended_at or state.instance_ended_at or d.observed_at
        since = d.observed_at - ended
        fgrace = policy.finalize_grace
        if since >= fgrace:
            return (
                "finalize_lost",
                f"complete, ended {format_duration(since)} ago ≥ finalize grace "
                f"{format_duration(fgrace)} with no AuditCompleted"
                f" → {_fails(policy, 'finalize_lost')}",
            )
        return (
            "finalize_pending",
            f"complete, ended {format_duration(since)} ago < finalize grace "
            f"{format_duration(fgrace)} → no change (completion may be in flight)",
        )
    return ("healthy", f"{status}, age {format_duration(age)} → healthy, no change")


LONG = "Error: " + "x" * 300 + " exceeded memory limit"
ERRORS = st.sampled_from(
    [
        None,
        "",
        "WorkflowTimeoutError: execution timed out",
        {"name": "Error", "message": "Worker exceeded CPU time limit"},
        {"name": "Error", "message": "something else"},
        {"name": "", "message": "durable object reset because its code was updated"},
        LONG,
    ]
)
# Times around the 10 minute graces, to the second and below it.
WHEN = st.builds(
    lambda minutes, seconds, ms: at(minutes, seconds + ms / 1000),
    st.sampled_from([0, 1, 9, 10, 11, 45, 600, 14_400]),
    st.integers(-61, 61),
    st.sampled_from([0, 1, 500, 999]),
)
POLICIES = st.builds(
    Policy,
    instance_lost_grace=st.sampled_from([timedelta(0), timedelta(minutes=10), timedelta(hours=2)]),
    finalize_grace=st.sampled_from([timedelta(seconds=90), timedelta(minutes=10)]),
    shadow=st.booleans(),
    brake_min_audits=st.sampled_from([0, 20]),
)
OBSERVATIONS = st.builds(
    lambda status, when, instance, error, ended, source, size: observed(
        status,
        when=when,
        instance=instance,
        error=error,
        ended=ended,
        source=source,
        sweep_size=size,
    ),
    st.sampled_from(OBSERVED_STATUSES),
    WHEN,
    st.sampled_from(["wf-1", "wf-old", None]),
    ERRORS,
    st.none() | WHEN,
    st.sampled_from(["instance", "listing", "subscription"]),
    st.sampled_from([None, 3, 50]),
)
PROBE_FAILURES = st.builds(
    lambda reason, when: probe_failed(reason=reason, when=when),
    st.sampled_from(["timeout", "network", "rate_limited", "server_error"]),
    WHEN,
)
STATES = st.sampled_from(
    [
        None,
        initial(AUDIT),
        running(),
        running(instance=None),
        running()._replace(instance_ended_at=T0 + timedelta(minutes=3)),
        running()._replace(held_decision_id="held-1", held_at=T0),
        running()._replace(status="failed", failed_by="reconciler"),
        running()._replace(status="completed"),
    ]
)


@given(STATES, OBSERVATIONS | PROBE_FAILURES, POLICIES)
def test_every_rule_reads_the_reason_it_formatted_eagerly(
    state: AuditState | None, event: AuditEvent, policy: Policy
) -> None:
    verdict = judge(state, event, policy)

    assert verdict is not None
    assert (verdict.rule, verdict.reason) == eager(state, event, policy)
    assert verdict.reason is verdict.reason  # made once, then kept


@given(STATES, OBSERVATIONS, POLICIES, st.booleans())
def test_the_reasons_decide_composes_read_as_they_were_formatted(
    state: AuditState | None, event: AuditEvent, policy: Policy, brake_engaged: bool
) -> None:
    verdict, _ = decide(state, event, policy, brake_engaged=brake_engaged)

    expected = eager(state, event, policy)
    plain = judge(state, event, policy)
    assert verdict is not None and expected is not None and plain is not None
    rule, reason = expected
    if plain.failure is not None:
        failure = plain.failure
        if state is not None and state.held_decision_id and failure.error_code in HELD_ERROR_CODES:
            reason = f"{reason}: a decision is already held → no second decision"
        else:
            held = hold_reason(event, failure, policy, brake_engaged)
            if held is not None:
                reason = f"{reason}; held: {held}"
    assert (verdict.rule, verdict.reason) == (rule, reason)


def test_a_verdict_equals_one_with_the_same_reason_given_as_text() -> None:
    lazy = judge(running(), observed("running", when=at(31)), Policy())

    assert lazy == Verdict("healthy", "running, age 31m → healthy, no change")
    assert lazy != Verdict("healthy", "running, age 30m → healthy, no change")
    assert repr(lazy) == (
        "Verdict(rule='healthy', reason='running, age 31m → healthy, no change', failure=None)"
    )


def test_other_events_get_no_verdict() -> None:
    assert judge(running(), completed(when=at(5)), Policy()) is None
