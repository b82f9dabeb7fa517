"""How the reconciler judges an event (:func:`judge_event`), and what it says about its
judgments: a log line per decision (and, at debug, per
observation that changed nothing, with the reason), and each reconciler failure that a later
completion overturned, counted and logged.

Whether a line is emitted is asked once a batch (:func:`loudness`), not per event: a call at a
level filtered out still binds a logger first (the logger is a lazy proxy, so that a later
configuration applies).
"""

from __future__ import annotations

import logging

import structlog

from consumers.components.reconciler.counting import count_verdict
from consumers.components.reconciler.log import Holds, fold_into
from consumers.runtime.metrics import OVERTURNED
from statemachine.events import (
    AuditEvent,
    AuditFailed,
    AuditFailureHeld,
    AuditFailureSimulated,
    ProbeRequested,
    ProbeRequestedData,
    Trigger,
    WorkflowTerminationRequested,
    derived_id,
)
from statemachine.machine import COMPLETED, FAILED
from statemachine.policy import Policy
from statemachine.rules import Verdict, decide, released, released_termination
from statemachine.state import AuditState

__all__ = [
    "code",
    "judge_event",
    "loudness",
    "overturned",
    "overturns",
    "tell_decided",
    "tell_unchanged",
    "terminating",
]

log = structlog.get_logger("auditrec.reconciler")


def _emits(level: int) -> bool:
    """Whether ``log`` emits at ``level`` as structlog is configured now."""
    is_enabled_for = getattr(log.bind(), "is_enabled_for", None)
    return is_enabled_for is None or bool(is_enabled_for(level))


def loudness() -> tuple[bool, bool]:
    """Whether the reconciler's DEBUG and INFO lines are emitted now."""
    return _emits(logging.DEBUG), _emits(logging.INFO)


def code(decision: AuditEvent | None) -> str:
    """The error code a decision carries (a held one: ``held``); ``""`` for none."""
    if isinstance(decision, AuditFailureHeld):
        return "held"
    if isinstance(decision, AuditFailed | AuditFailureSimulated):
        return decision.data.error_code
    if isinstance(decision, WorkflowTerminationRequested):
        return decision.data.decision.error_code
    return ""


def overturns(before: AuditState | None, after: AuditState) -> bool:
    """Whether a reconciler failure was overturned (the first test fails for nearly all)."""
    return (
        before is not None
        and before.status == FAILED
        and before.failed_by == "reconciler"
        and after.status == COMPLETED
    )


def overturned(event: AuditEvent, info: bool) -> None:
    """Count and log (when ``info`` lines are emitted) a reconciler failure overturned by
    ``event``."""
    OVERTURNED.inc()
    if info:
        log.info("failure overturned", audit_id=event.audit_id, rule="overturn")


def tell_unchanged(event: AuditEvent, verdict: Verdict) -> None:
    """Why an observation changed nothing (a DEBUG line)."""
    log.debug("judged", audit_id=event.audit_id, rule=verdict.rule, reason=verdict.reason)


def tell_decided(
    event: AuditEvent, verdict: Verdict | None, decision: AuditEvent, policy: Policy
) -> None:
    """The decision ``event`` called for, with the rule and its reason (an INFO line)."""
    if type(decision) is AuditFailureHeld:
        what = "audit failure held"
    elif type(decision) is WorkflowTerminationRequested:
        what = "stalled: instance termination requested"
    elif type(decision) is AuditFailureSimulated and code(decision) == "stalled":
        what = "audit stalled (reported)"
    else:
        what = "audit failed" if not policy.shadow else "audit would fail (shadow)"
    log.info(
        what,
        audit_id=event.audit_id,
        rule=verdict.rule if verdict else "released",
        error_code=code(decision),
        reason=verdict.reason if verdict else "the held decision was released",
        decision_id=str(decision.event_id),
    )


def judge_event(
    states: dict[str, AuditState],
    holds: Holds,
    event: AuditEvent,
    policy: Policy,
    brake_engaged: bool,
    loud: tuple[bool, bool],
) -> AuditEvent | None:
    """Fold ``event`` (of a type a rule judges) into its audit's state in ``states``; the
    decision it calls for, folded too. ``loud``: whether DEBUG and INFO lines are emitted."""
    before = states.get(event.audit_id)
    verdict: Verdict | None = None
    decision: AuditEvent | None
    if event.type == "AuditFailureReleased":  # always a model (MODELS_ONLY)
        held = holds.get(event.audit_id)
        decision = released(before, event, held) or released_termination(
            before, event, held, policy
        )
    else:
        verdict, decision = decide(before, event, policy, brake_engaged=brake_engaged)
    after = fold_into(states, holds, event, before)
    debug, info = loud
    if overturns(before, after):
        overturned(event, info)
    count_verdict(verdict, decision, event)
    if decision is None:
        if verdict is not None and debug:  # an observation that changed nothing: why
            tell_unchanged(event, verdict)
        return None
    fold_into(states, holds, decision, states.get(event.audit_id))
    if info:
        tell_decided(event, verdict, decision, policy)
    return decision


def terminating(request: AuditEvent) -> ProbeRequested:
    """The probe request that carries out a termination request (its id derived from it): the
    probe terminates the instance, then reads it, and the reconciler judges what it reads."""
    assert isinstance(request, WorkflowTerminationRequested)
    d = request.data
    reconciled_by = d.decision.reconciled_by
    trigger = Trigger(reconciled_by.value) if reconciled_by is not None else Trigger.WATCHDOG
    return ProbeRequested(
        event_id=derived_id(request.event_id, "termination-probe"),
        audit_id=request.audit_id,
        occurred_at=request.occurred_at,
        producer=request.producer,
        causation_id=request.event_id,
        correlation_id=request.correlation_id,
        data=ProbeRequestedData(
            workflow_instance_id=d.workflow_instance_id,
            trigger=trigger,
            workflow=d.workflow,
            terminate=True,
        ),
    )
