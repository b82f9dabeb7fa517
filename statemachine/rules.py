"""The reconciler's rules (DESIGN §4): what an observation means for a running audit.

:func:`judge` is pure: the state before the event, the event and the policy in; a
:class:`Verdict` out — the rule that fired, a reason with its numbers, and the failure to
record if any. The clock is the observation's own time, so a replay gives the same answer.
:func:`decide` turns a verdict into the event the reconciler appends, with an id derived from
the observation's id (a redelivered observation yields the same decision).
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

from statemachine.classifier import classify, error_text, truncate
from statemachine.events import (
    AuditEvent,
    AuditFailed,
    AuditFailedData,
    AuditFailureHeld,
    AuditFailureHeldData,
    AuditFailureReleased,
    AuditFailureSimulated,
    TerminationRequestedData,
    Trigger,
    WorkflowProbeFailed,
    WorkflowStatusObserved,
    WorkflowTerminationRequested,
    derived_id,
)
from statemachine.failure import PRODUCER, derived, failure_data
from statemachine.machine import INITIAL
from statemachine.policy import Policy, format_duration
from statemachine.state import AuditState
from statemachine.verdict import Verdict
from statemachine.vocabulary import (
    HEALTHY_STATUSES,
    HELD_ERROR_CODES,
    STALL_STATUSES,
    FailureRule,
)

# Verdict is defined in statemachine.verdict, and named here too: it is what judge() gives.
__all__ = [
    "PRODUCER",
    "Verdict",
    "decide",
    "hold_reason",
    "judge",
    "released",
    "released_termination",
    "termination",
]


def _fails(policy: Policy, code: str) -> str:
    return f"would fail {code} (shadow mode)" if policy.shadow else f"failed {code}"


def judge(state: AuditState | None, event: AuditEvent, policy: Policy) -> Verdict | None:
    """The verdict on an observation or probe failure; ``None`` for other events.

    Reasons are functions (made when read: see :class:`Verdict`) of values that never change.
    Events are told apart by their ``type``."""
    kind = event.type
    if kind == "WorkflowProbeFailed":
        failed = cast(WorkflowProbeFailed, event).data
        return Verdict(
            "probe_failed",
            lambda: f"probe failed ({failed.reason.value}): {failed.detail} → no change",
        )
    if kind != "WorkflowStatusObserved":
        return None
    observed = cast(WorkflowStatusObserved, event)
    d = observed.data
    if state is None or state.status == INITIAL:
        return Verdict("unknown_audit", "observation for an audit never started → ignored")
    if state.status != "running":
        return Verdict("not_running", f"audit is already {state.status} → ignored")
    if d.workflow_instance_id != state.workflow_instance_id:
        current = state.workflow_instance_id
        return Verdict(
            "stale_instance",
            lambda: (
                f"observed instance {d.workflow_instance_id!r} is not the audit's current "
                f"{current!r} → ignored"
            ),
        )
    assert state.started_at is not None
    status = d.status
    if status not in HEALTHY_STATUSES and d.source != "instance":  # (healthy: by far the most)
        if d.source == "listing":
            return Verdict(
                "listing_only",
                lambda: (
                    f"listed {status} → no change (a listing alone never fails an audit: the "
                    "instance is asked for alone)"
                ),
            )
        return Verdict(
            "subscription_only",
            lambda: (
                f"reported {status} by the event subscription → no change (a message alone "
                "never fails an audit: the instance is asked for alone)"
            ),
        )
    age = d.observed_at - state.started_at
    if d.progress is not None and status in STALL_STATUSES and policy.stalls_on:
        stalled = _stall(state, observed, policy)
        if stalled is not None:
            return stalled
    if status in HEALTHY_STATUSES:  # rule 7, by far the most frequent verdict
        return Verdict(
            "healthy", lambda: f"{status}, age {format_duration(age)} → healthy, no change"
        )
    if status == "errored":
        text = error_text(d.error)
        code = classify(text) or "unknown"
        return Verdict(
            "errored",
            lambda: (
                f"errored ({truncate(text, 200) if text else 'no error payload'})"
                f" → {_fails(policy, code)}"
            ),
            failure_data(
                "errored", state, observed, policy, code, text or "Workflow instance errored", text
            ),
        )
    if status == "terminated" and state.termination_requested_at is not None:
        requested = state.termination_requested_at
        return Verdict(
            "stalled",
            lambda: (
                f"terminated after auditrec asked for it at {requested.isoformat()} (stalled)"
                f" → {_fails(policy, 'stalled')}"
            ),
            failure_data(
                "stalled",
                state,
                observed,
                policy,
                "stalled",
                "Workflow instance stalled (no progress) and was terminated by auditrec",
                error_text(d.error),
            ),
        )
    if status == "terminated":
        text = error_text(d.error)
        code = classify(text) or "workflow_terminated"
        return Verdict(
            "terminated",
            lambda: (
                f"terminated{f' ({truncate(text, 200)})' if text else ''} → {_fails(policy, code)}"
            ),
            failure_data(
                "terminated",
                state,
                observed,
                policy,
                code,
                text or "Workflow instance was terminated",
                text,
            ),
        )
    if status in ("not_found", "not_attached"):
        rule: FailureRule = "instance_lost" if status == "not_found" else "never_attached"
        grace = policy.instance_lost_grace
        if age >= grace:
            detail = (
                "Workflow instance was not found"
                if status == "not_found"
                else "Workflow instance was never attached"
            )
            return Verdict(
                rule,
                lambda: (
                    f"{status}, age {format_duration(age)} ≥ grace {format_duration(grace)}"
                    f" → {_fails(policy, 'instance_lost')}"
                ),
                failure_data(
                    rule, state, observed, policy, "instance_lost", detail, error_text(d.error)
                ),
            )
        return Verdict(
            rule,
            lambda: (
                f"{status}, age {format_duration(age)} < grace {format_duration(grace)} → no change"
            ),
        )
    if status == "complete":
        ended = d.workflow_ended_at or state.instance_ended_at or d.observed_at
        since = d.observed_at - ended
        fgrace = policy.finalize_grace
        if since >= fgrace:
            return Verdict(
                "finalize_lost",
                lambda: (
                    f"complete, ended {format_duration(since)} ago ≥ finalize grace "
                    f"{format_duration(fgrace)} with no AuditCompleted"
                    f" → {_fails(policy, 'finalize_lost')}"
                ),
                failure_data(
                    "finalize_lost",
                    state,
                    observed,
                    policy,
                    "finalize_lost",
                    "Workflow completed but the audit was never finalized",
                    error_text(d.error),
                ),
            )
        return Verdict(
            "finalize_pending",
            lambda: (
                f"complete, ended {format_duration(since)} ago < finalize grace "
                f"{format_duration(fgrace)} → no change (completion may be in flight)"
            ),
        )
    return Verdict("healthy", f"{status} → no change")  # pragma: no cover - closed vocabulary


def _stall(state: AuditState, observed: WorkflowStatusObserved, policy: Policy) -> Verdict | None:
    """The stall rule (DESIGN §10) on a ``running``/``queued`` instance read for a stall check:
    ``None`` when it does not apply (progress since the check was asked, or not yet stale)."""
    d = observed.data
    progress = d.progress
    assert progress is not None
    if str(progress.event_id) != state.progress_event_id:
        return None  # the publisher spoke since the watchdog looked: not stalled
    quiet = d.observed_at - progress.recorded_at
    limit = policy.stalled_after
    if quiet < limit:
        return None
    step = d.step
    doing = ""
    if step is not None:
        doing = f", step {step.name!r} after {step.attempts} attempt(s)"
        if step.retrying:
            doing += (
                f", retrying ({truncate(error_text(step.error) or '', 120) or 'no error text'})"
            )
    if state.stalled_at is not None and not policy.may_terminate(state.workflow):
        return Verdict(
            "stalled",
            lambda: (
                f"{d.status}, no progress for {format_duration(quiet)}{doing}: stalled, "
                "reported already → no change"
            ),
        )
    detail = f"No progress for {format_duration(quiet)} while the instance was {d.status}"
    if step is not None:
        detail += f" (step {step.name!r}, {step.attempts} attempt(s)"
        detail += (
            f", retrying: {truncate(error_text(step.error) or '', 200)})" if step.retrying else ")"
        )
    failure = failure_data("stalled", state, observed, policy, "stalled", detail, None)
    evidence = dict(failure.policy or {})
    evidence["progress_event_id"] = str(progress.event_id)
    evidence["progress_recorded_at"] = progress.recorded_at.isoformat()
    if step is not None and len(evidence) < 29:
        evidence["step"] = truncate(step.name, 200)
        evidence["step_attempts"] = step.attempts
        evidence["step_retrying"] = step.retrying
    failure = failure.model_copy(update={"policy": evidence})
    if policy.may_terminate(state.workflow):
        action = "terminate the instance, then fail stalled"
        if state.termination_requested_at is not None:
            action = "termination asked again (the instance still runs)"
    elif policy.shadow:
        action = "would fail stalled (shadow mode)"
    else:
        action = "reported, not failed (AUDITREC_STALLED_ACTION=report)"
    return Verdict(
        "stalled",
        lambda: (
            f"{d.status}, no progress for {format_duration(quiet)} ≥ {format_duration(limit)}"
            f"{doing} → {action}"
        ),
        failure,
    )


def hold_reason(
    event: AuditEvent, failure: AuditFailedData, policy: Policy, brake_engaged: bool = False
) -> str | None:
    """Why the mass-failure brake holds this failure instead of applying it; ``None`` when it
    does not. Only decisions made from the absence of evidence are held: while the brake is
    engaged, and, awaiting their sweep's verdict, those of a watchdog sweep large enough to
    trip it."""
    if not policy.brake_on or failure.error_code not in HELD_ERROR_CODES:
        return None
    if failure.workflow_status == "terminated":
        return None  # a stall's termination, observed: a fact, no longer an intention
    if brake_engaged:
        return "the mass-failure brake is engaged"
    if event.type != "WorkflowStatusObserved":
        return None
    d = event.data
    if d.trigger is Trigger.WATCHDOG and (d.sweep_size or 0) >= policy.brake_min_audits:
        return (
            f"sweep {d.sweep_id} asked about {d.sweep_size} audits (≥ {policy.brake_min_audits}):"
            f" held until the sweep's verdict (the brake engages at ≥ {policy.brake_min_audits}"
            f" instance_lost and more than {policy.brake_min_share:.0%} of its observations)"
        )
    return None


def decide(
    state: AuditState | None,
    event: AuditEvent,
    policy: Policy,
    *,
    brake_engaged: bool = False,
) -> tuple[Verdict | None, AuditEvent | None]:
    """The verdict, and the decision event to append when the audit must fail: ``AuditFailed``
    (in shadow mode ``AuditFailureSimulated``), or ``AuditFailureHeld`` when the mass-failure
    brake holds it (:func:`hold_reason`). An audit with a decision held gets no second one.
    A stall is reported (``AuditFailureSimulated``) or, with ``terminate``, calls for its
    instance's termination (``WorkflowTerminationRequested``, which the brake may hold)."""
    verdict = judge(state, event, policy)
    if verdict is None or verdict.failure is None:
        return verdict, None
    failure = verdict.failure
    observed_at = event.data.observed_at  # type: ignore[union-attr]
    stall = verdict.rule == "stalled" and failure.workflow_status != "terminated"
    if stall and not policy.may_terminate(state.workflow if state is not None else None):
        # Reported (or shadow mode): recorded, the audit keeps running; nothing to hold.
        report = AuditFailureSimulated(
            **derived(event, "reconciler-decision", observed_at), data=failure
        )
        return verdict, report
    pending = state is not None and state.held_decision_id is not None
    if pending and failure.error_code in HELD_ERROR_CODES:
        return Verdict(
            verdict.rule,
            lambda: f"{verdict.reason}: a decision is already held → no second decision",
        ), None
    held = hold_reason(event, failure, policy, brake_engaged)
    if held is not None:
        hold = AuditFailureHeld(
            **derived(event, "reconciler-hold", observed_at),
            data=AuditFailureHeldData(
                decision=failure,
                sweep_id=getattr(event.data, "sweep_id", None),
                reason=held,
            ),
        )
        return Verdict(verdict.rule, lambda: f"{verdict.reason}; held: {held}", failure), hold
    if stall:  # the brake let it through: the instance is terminated first
        return verdict, termination(state, event, failure, policy)
    build = AuditFailureSimulated if policy.shadow else AuditFailed
    decision = build(**derived(event, "reconciler-decision", observed_at), data=failure)
    return verdict, decision


def termination(
    state: AuditState | None,
    cause: AuditEvent,
    failure: AuditFailedData,
    policy: Policy,
    at: datetime | None = None,
) -> WorkflowTerminationRequested:
    """The request to terminate a stalled audit's instance, derived from ``cause`` (the
    observation that found the stall, or its held decision), made ``at`` (default: when the
    observation was read)."""
    assert state is not None and state.workflow_instance_id is not None
    at = at or getattr(cause.data, "observed_at", None) or cause.occurred_at
    return WorkflowTerminationRequested(
        **derived(cause, "reconciler-termination", at),
        data=TerminationRequestedData(
            workflow_instance_id=state.workflow_instance_id,
            workflow=state.workflow or policy.default_workflow,
            decision=failure,
        ),
    )


def released_termination(
    state: AuditState | None,
    event: AuditFailureReleased,
    held: AuditFailureHeld | None,
    policy: Policy,
) -> WorkflowTerminationRequested | None:
    """The termination a release lets through, when the held decision was a stall's."""
    if state is None or state.status != "running" or held is None:
        return None
    if state.held_decision_id != str(event.data.held_id) or held.event_id != event.data.held_id:
        return None
    decision = held.data.decision
    if decision.rule != "stalled" or decision.workflow_status == "terminated":
        return None
    if state.workflow_instance_id is None or not policy.may_terminate(state.workflow):
        return None
    evidence = dict(decision.policy or {})
    if len(evidence) < 32:
        evidence["released_by"] = event.data.actor
    # made when released: the probe carries out only requests of the last minutes
    released_at = event.occurred_at
    return termination(
        state, held, decision.model_copy(update={"policy": evidence}), policy, released_at
    )


def released(
    state: AuditState | None, event: AuditFailureReleased, held: AuditFailureHeld | None
) -> AuditFailed | None:
    """The failure a release lets through: the held decision, as the ``AuditFailed`` it would
    have been (same id, same causation), when the audit still runs with that very hold."""
    if state is None or state.status != "running" or held is None:
        return None
    if state.held_decision_id != str(event.data.held_id) or held.event_id != event.data.held_id:
        return None
    cause = held.causation_id or held.event_id
    decision = held.data.decision
    if decision.rule == "stalled" and decision.workflow_status != "terminated":
        return None  # a held termination: see :func:`released_termination`
    evidence = dict(decision.policy or {})
    if len(evidence) < 32:
        evidence["released_by"] = event.data.actor
    return AuditFailed(
        event_id=derived_id(cause, "reconciler-decision"),
        audit_id=event.audit_id,
        occurred_at=event.occurred_at,
        producer=PRODUCER,
        causation_id=cause,
        correlation_id=held.correlation_id,
        data=decision.model_copy(update={"policy": evidence}),
    )
