"""Why an audit ended as it did: each event, the state before → after, and what fired.

A recorded reconciler decision is explained with the policy it recorded, never with today's
settings: its observation is judged again under the thresholds in that decision, and the
decision names its rule. An observation that led to no decision is judged under the policy
given (today's); when that policy would fail the audit, the step says no decision was recorded
— or, while a decision is held by the mass-failure brake, that no second one is made.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from statemachine.events import (
    AuditEvent,
    AuditFailed,
    AuditFailureDiscarded,
    AuditFailureHeld,
    AuditFailureReleased,
    AuditFailureSimulated,
    AuditRestored,
    AuditStarted,
    WorkflowTerminationRequested,
)
from statemachine.machine import INITIAL, next_status
from statemachine.policy import Policy
from statemachine.rules import judge
from statemachine.state import AuditState, evolve
from statemachine.vocabulary import HELD_ERROR_CODES

__all__ = ["Step", "explain", "explain_one", "recorded_decisions"]

Decision = AuditFailed | AuditFailureSimulated | AuditFailureHeld | WorkflowTerminationRequested


def _policy_of(decision: Decision) -> Mapping[str, object] | None:
    if isinstance(decision, AuditFailureHeld | WorkflowTerminationRequested):
        return decision.data.decision.policy
    return decision.data.policy


@dataclass(frozen=True, slots=True)
class Step:
    event: AuditEvent
    before: str
    after: str
    rule: str
    reason: str
    # A failure the mass-failure brake holds: the hold, the observation that made it, or one
    # judged a failure while a decision is already held (no second decision).
    held: bool = False
    # An observation or probe failure judged to change nothing (healthy, within a grace...).
    no_change: bool = False

    def as_dict(self) -> dict[str, object]:
        return {
            "event_id": str(self.event.event_id),
            "type": self.event.type,
            "occurred_at": self.event.occurred_at.isoformat(),
            "producer": self.event.producer,
            "before": self.before,
            "after": self.after,
            "rule": self.rule,
            "reason": self.reason,
        }


def recorded_decisions(events: Sequence[AuditEvent]) -> dict[uuid.UUID, Decision]:
    """The reconciler's decisions in ``events`` (held ones too), by the observation that
    caused each."""
    found: dict[uuid.UUID, Decision] = {}
    for e in events:
        if e.causation_id is None or e.causation_id in found:
            continue  # a released failure has its hold's cause: the hold came first
        if isinstance(e, AuditFailureHeld | WorkflowTerminationRequested) or (
            isinstance(e, AuditFailed | AuditFailureSimulated)
            and e.data.failed_by.value == "reconciler"
        ):
            found[e.causation_id] = e
    return found


def explain_one(
    state: AuditState | None,
    event: AuditEvent,
    policy: Policy,
    decision: Decision | None = None,
) -> tuple[Step, AuditState]:
    """The step for ``event`` applied to ``state``, and the state after it. ``decision`` is the
    reconciler's recorded decision on this observation, if there is one: its policy applies."""
    current = state if state is not None else AuditState(audit_id=event.audit_id)
    after = evolve(current, event)
    in_force = policy
    recorded = _policy_of(decision) if decision is not None else None
    if recorded is not None:
        in_force = Policy.from_evidence(recorded, policy)
    verdict = judge(current, event, in_force)
    row = next_status(current.status, event.type, current)
    holds = isinstance(event, AuditFailureHeld) or isinstance(decision, AuditFailureHeld)
    no_change = False
    if verdict is not None:
        rule, reason = verdict.rule, verdict.reason
        no_change = verdict.failure is None
        asked_by = getattr(event.data, "actor", None)
        if asked_by is not None:
            reason += f" (manual probe by {_who(event.data)})"
        failure = verdict.failure
        if failure is not None and decision is None and current.status == "running":
            if current.held_decision_id is not None and failure.error_code in HELD_ERROR_CODES:
                holds = True  # what the reconciler says then (rules.decide): no second decision
                reason += ": a decision is already held → no second decision"
            else:
                reason += " (under today's policy; no decision was recorded)"
        elif isinstance(decision, AuditFailureHeld):
            reason += "; held by the mass-failure brake, not applied"
    elif row is None:
        rule = "recorded"
        if isinstance(event, AuditStarted) and current.exists:
            reason = "second AuditStarted for a known audit → recorded, not applied"
        elif isinstance(event, AuditRestored) and current.exists:
            rule = "restore_refused"
            reason = (
                f"restore by {event.data.actor} refused: the audit is {current.status}"
                + (f" by {current.failed_by}" if current.status == "failed" else "")
                + " (only a failure by the reconciler or an operator is restored) → recorded"
            )
        elif not current.exists:
            reason = f"{event.type} before AuditStarted → recorded, not applied"
        else:
            reason = f"audit is {current.status}: {event.type} recorded, not applied"
    else:
        rule = "transition"
        reason = row.note
        if isinstance(event, AuditFailed | AuditFailureSimulated):
            d = event.data
            rule = d.rule or rule
            done = "would fail" if isinstance(event, AuditFailureSimulated) else "failed"
            by = f"{d.failed_by.value} {_who(d)}" if d.actor else d.failed_by.value
            reason = f"{done} {d.error_code} by {by}: {d.error_detail}"
            if d.failed_by.value == "operator":
                rule = "operator_failed"
            released_by = (d.policy or {}).get("released_by")
            if released_by is not None:
                reason += f" (held, then released by {released_by})"
        elif isinstance(event, AuditFailureHeld):
            held = event.data.decision
            rule = held.rule or "held"
            reason = f"{held.error_code} held, not applied: {event.data.reason}"
            if after.held_decision_id != str(event.event_id):
                reason = f"{held.error_code} held while another hold is pending → recorded"
        elif isinstance(event, WorkflowTerminationRequested):
            asked = event.data
            rule = "stalled"
            reason = (
                f"stalled: termination of instance {asked.workflow_instance_id!r} in workflow "
                f"{asked.workflow!r} asked for ({asked.decision.error_detail}); the audit fails "
                "stalled once the termination is observed"
            )
            released_by = (asked.decision.policy or {}).get("released_by")
            if released_by is not None:
                reason += f" (held, then released by {released_by})"
        elif isinstance(event, AuditFailureReleased | AuditFailureDiscarded):
            verb = "released" if isinstance(event, AuditFailureReleased) else "discarded"
            rule = f"hold_{verb}"
            why = f": {event.data.reason}" if event.data.reason else ""
            if current.held_decision_id == str(event.data.held_id):
                reason = f"held decision {verb} by {event.data.actor}{why}"
            else:
                reason = f"no such hold pending → nothing {verb} ({event.data.actor}{why})"
        elif isinstance(event, AuditRestored):
            undone = event.data
            rule = "restored"
            reason = (
                f"failure {undone.error_code} by {undone.failed_by.value} undone by "
                f"{_who(undone)}: {undone.reason} → running again [{row.guard}]"
            )
        elif row.guard:
            reason = f"{row.note} [{row.guard}]"
    before = current.status if current.exists else INITIAL
    return Step(event, before, after.status, rule, reason, holds, no_change), after


def _who(data: object) -> str:
    """Who acted, as recorded: the actor, and the person they acted for when named."""
    actor = getattr(data, "actor", None)
    behalf = getattr(data, "on_behalf_of", None)
    return f"{actor} on behalf of {behalf}" if behalf else str(actor)


def explain(events: Iterable[AuditEvent], policy: Policy) -> list[Step]:
    history = list(events)
    decisions = recorded_decisions(history)
    steps: list[Step] = []
    state: AuditState | None = None
    for event in history:
        step, state = explain_one(state, event, policy, decisions.get(event.event_id))
        steps.append(step)
    return steps
