"""The failure a rule records, and the envelope of the events the reconciler derives.

:func:`failure_data` is what a failing rule records: the code, the detail, who failed the audit
and how, the policy's thresholds and the observation's evidence. :func:`derived` is the
envelope of a decision derived from the event that caused it, with an id derived from the
cause's (a redelivered observation yields the same decision).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from statemachine.classifier import truncate
from statemachine.events import (
    AuditEvent,
    AuditFailedData,
    FailedBy,
    ReconciledBy,
    Trigger,
    WorkflowStatusObserved,
    derived_id,
)
from statemachine.policy import Policy
from statemachine.state import AuditState
from statemachine.vocabulary import FailureRule

__all__ = ["PRODUCER", "derived", "failure_data"]

PRODUCER = "auditrec-reconciler"


_RECONCILED_BY = {
    Trigger.WATCHDOG: ReconciledBy.WATCHDOG,
    Trigger.SUBSCRIPTION: ReconciledBy.SUBSCRIPTION,
}


def _reconciled_by(trigger: Trigger) -> ReconciledBy:
    return _RECONCILED_BY.get(trigger, ReconciledBy.ON_DEMAND)


def failure_data(
    rule: FailureRule,
    state: AuditState,
    obs: WorkflowStatusObserved,
    policy: Policy,
    code: str,
    detail: str,
    text: str | None,
) -> AuditFailedData:
    """What ``rule`` records when it fails the audit in ``state`` on observation ``obs``;
    ``text`` is the observed error's (:func:`~statemachine.classifier.error_text`, which the
    rule has read already)."""
    d = obs.data
    evidence = policy.evidence()
    evidence["trigger"] = d.trigger.value
    evidence["observed_at"] = d.observed_at.isoformat()
    evidence["observation_id"] = str(obs.event_id)
    if d.workflow_ended_at is not None:
        evidence["workflow_ended_at"] = d.workflow_ended_at.isoformat()
    if d.notice is not None:  # the event subscription reported it: when, and which message
        evidence["reported_at"] = d.notice.at.isoformat()
        evidence["message_id"] = d.notice.message_id
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


def derived(cause: AuditEvent, role: str, at: datetime) -> dict[str, Any]:
    """The envelope of a reconciler event derived from ``cause`` (its id from the cause's)."""
    return {
        "event_id": derived_id(cause.event_id, role),
        "audit_id": cause.audit_id,
        "occurred_at": at,
        "producer": PRODUCER,
        "causation_id": cause.event_id,
        "correlation_id": cause.correlation_id,
    }
