"""Why an audit ended as it did: each event, the state before → after, and what fired."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from statemachine.events import AuditEvent, AuditFailed, AuditStarted
from statemachine.machine import INITIAL, next_status
from statemachine.policy import Policy
from statemachine.rules import judge
from statemachine.state import AuditState, evolve

__all__ = ["Step", "explain", "explain_one"]


@dataclass(frozen=True, slots=True)
class Step:
    event: AuditEvent
    before: str
    after: str
    rule: str
    reason: str

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


def explain_one(
    state: AuditState | None, event: AuditEvent, policy: Policy
) -> tuple[Step, AuditState]:
    """The step for ``event`` applied to ``state``, and the state after it."""
    current = state if state is not None else AuditState(audit_id=event.audit_id)
    after = evolve(current, event)
    verdict = judge(current, event, policy)
    row = next_status(current.status, event.type, current.failed_by)
    if verdict is not None:
        rule, reason = verdict.rule, verdict.reason
    elif row is None:
        rule = "recorded"
        if isinstance(event, AuditStarted) and current.exists:
            reason = "second AuditStarted for a known audit → recorded, not applied"
        elif not current.exists:
            reason = f"{event.type} before AuditStarted → recorded, not applied"
        else:
            reason = f"audit is {current.status}: {event.type} recorded, not applied"
    else:
        rule = "transition"
        reason = row.note
        if isinstance(event, AuditFailed):
            d = event.data
            reason = f"failed {d.error_code} by {d.failed_by.value}: {d.error_detail}"
        elif row.guard:
            reason = f"{row.note} [{row.guard}]"
    before = current.status if current.exists else INITIAL
    return Step(event, before, after.status, rule, reason), after


def explain(events: Iterable[AuditEvent], policy: Policy) -> list[Step]:
    steps: list[Step] = []
    state: AuditState | None = None
    for event in events:
        step, state = explain_one(state, event, policy)
        steps.append(step)
    return steps
