"""The reconciler's rules (DESIGN §4): what an observation means for a running audit.

:func:`judge` is pure: the state before the event, the event and the policy in; a
:class:`Verdict` out — the rule that fired, a reason with its numbers, and the failure to
record if any. The clock is the observation's own time, so a replay gives the same answer.
:func:`decide` turns a verdict into the event the reconciler appends, with an id derived from
the observation's id (a redelivered observation yields the same decision).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from statemachine.classifier import classify, error_text, truncate
from statemachine.events import (
    AuditEvent,
    AuditFailed,
    AuditFailedData,
    AuditFailureSimulated,
    FailedBy,
    ReconciledBy,
    Trigger,
    WorkflowProbeFailed,
    WorkflowStatusObserved,
    derived_id,
)
from statemachine.policy import Policy, format_duration
from statemachine.state import AuditState
from statemachine.vocabulary import HEALTHY_STATUSES, FailureRule

__all__ = ["PRODUCER", "Verdict", "decide", "judge"]

PRODUCER = "auditrec-reconciler"


@dataclass(frozen=True, slots=True)
class Verdict:
    """``rule`` names what fired; ``failure`` is set when the audit must fail."""

    rule: str
    reason: str
    failure: AuditFailedData | None = None


def _reconciled_by(trigger: Trigger) -> ReconciledBy:
    return ReconciledBy.WATCHDOG if trigger is Trigger.WATCHDOG else ReconciledBy.ON_DEMAND


def _fail(
    rule: FailureRule,
    state: AuditState,
    obs: WorkflowStatusObserved,
    policy: Policy,
    code: str,
    detail: str,
) -> AuditFailedData:
    d = obs.data
    evidence = dict(policy.evidence())
    evidence["trigger"] = d.trigger.value
    evidence["observed_at"] = d.observed_at.isoformat()
    evidence["observation_id"] = str(obs.event_id)
    if d.workflow_ended_at is not None:
        evidence["workflow_ended_at"] = d.workflow_ended_at.isoformat()
    text = error_text(d.error)
    if text:
        evidence["error"] = truncate(text)
    if d.workflow_instance_id:
        evidence["workflow_instance_id"] = d.workflow_instance_id
    return AuditFailedData(
        error_code=code,
        error_detail=truncate(detail),
        failed_phase=state.current_phase,
        failed_by=FailedBy.RECONCILER,
        reconciled_by=_reconciled_by(d.trigger),
        workflow_status=d.status,
        policy=evidence,
        rule=rule,
    )


def _fails(policy: Policy, code: str) -> str:
    return f"would fail {code} (shadow mode)" if policy.shadow else f"failed {code}"


def _age(state: AuditState, at: datetime) -> str:
    assert state.started_at is not None
    return format_duration(at - state.started_at)


def judge(state: AuditState | None, event: AuditEvent, policy: Policy) -> Verdict | None:
    """The verdict on an observation or probe failure; ``None`` for other events."""
    if isinstance(event, WorkflowProbeFailed):
        return Verdict(
            "probe_failed",
            f"probe failed ({event.data.reason.value}): {event.data.detail} → no change",
        )
    if not isinstance(event, WorkflowStatusObserved):
        return None
    d = event.data
    if state is None or not state.exists:
        return Verdict("unknown_audit", "observation for an audit never started → ignored")
    if state.status != "running":
        return Verdict("not_running", f"audit is already {state.status} → ignored")
    if d.workflow_instance_id != state.workflow_instance_id:
        return Verdict(
            "stale_instance",
            f"observed instance {d.workflow_instance_id!r} is not the audit's current "
            f"{state.workflow_instance_id!r} → ignored",
        )
    assert state.started_at is not None
    age = d.observed_at - state.started_at
    grace = policy.instance_lost_grace
    status = d.status
    if status == "errored":
        text = error_text(d.error)
        code = classify(text) or "unknown"
        return Verdict(
            "errored",
            f"errored ({truncate(text, 200) if text else 'no error payload'})"
            f" → {_fails(policy, code)}",
            _fail("errored", state, event, policy, code, text or "Workflow instance errored"),
        )
    if status == "terminated":
        text = error_text(d.error)
        code = classify(text) or "workflow_terminated"
        return Verdict(
            "terminated",
            f"terminated{f' ({truncate(text, 200)})' if text else ''} → {_fails(policy, code)}",
            _fail(
                "terminated", state, event, policy, code, text or "Workflow instance was terminated"
            ),
        )
    if status in ("not_found", "not_attached"):
        rule: FailureRule = "instance_lost" if status == "not_found" else "never_attached"
        if age >= grace:
            detail = (
                "Workflow instance was not found"
                if status == "not_found"
                else "Workflow instance was never attached"
            )
            return Verdict(
                rule,
                f"{status}, age {format_duration(age)} ≥ grace {format_duration(grace)}"
                f" → {_fails(policy, 'instance_lost')}",
                _fail(rule, state, event, policy, "instance_lost", detail),
            )
        return Verdict(
            rule,
            f"{status}, age {format_duration(age)} < grace {format_duration(grace)} → no change",
        )
    if status == "complete":
        ended = d.workflow_ended_at or state.instance_ended_at or d.observed_at
        since = d.observed_at - ended
        fgrace = policy.finalize_grace
        if since >= fgrace:
            return Verdict(
                "finalize_lost",
                f"complete, ended {format_duration(since)} ago ≥ finalize grace "
                f"{format_duration(fgrace)} with no AuditCompleted"
                f" → {_fails(policy, 'finalize_lost')}",
                _fail(
                    "finalize_lost",
                    state,
                    event,
                    policy,
                    "finalize_lost",
                    "Workflow completed but the audit was never finalized",
                ),
            )
        return Verdict(
            "finalize_pending",
            f"complete, ended {format_duration(since)} ago < finalize grace "
            f"{format_duration(fgrace)} → no change (completion may be in flight)",
        )
    if status in HEALTHY_STATUSES:
        return Verdict("healthy", f"{status}, age {format_duration(age)} → healthy, no change")
    return Verdict("healthy", f"{status} → no change")  # pragma: no cover - closed vocabulary


def decide(
    state: AuditState | None, event: AuditEvent, policy: Policy
) -> tuple[Verdict | None, AuditEvent | None]:
    """The verdict, and the decision event to append (``AuditFailed``, or in shadow mode
    ``AuditFailureSimulated``) when the audit must fail."""
    verdict = judge(state, event, policy)
    if verdict is None or verdict.failure is None:
        return verdict, None
    cls = AuditFailureSimulated if policy.shadow else AuditFailed
    decision = cls(
        event_id=derived_id(event.event_id, "reconciler-decision"),
        audit_id=event.audit_id,
        occurred_at=event.data.observed_at,  # type: ignore[union-attr]
        producer=PRODUCER,
        causation_id=event.event_id,
        correlation_id=event.correlation_id,
        data=verdict.failure,
    )
    return verdict, decision
