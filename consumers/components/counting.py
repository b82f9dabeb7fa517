"""The reconciler's verdicts in the metrics: a decision is counted under its rule only when it
decided a failure (applied, held by the brake, or simulated in shadow mode); a verdict that
changed nothing is counted by what it found (``healthy``, ``within_grace`` for a lost instance
still inside its grace, ``finalize_pending``, ``not_running``, ...), never under a failure
rule's name."""

from __future__ import annotations

from typing import Any

from consumers.runtime.metrics import DECISIONS, JUDGED
from statemachine.events import (
    AuditEvent,
    AuditFailed,
    AuditFailureHeld,
    AuditFailureReleased,
    AuditFailureSimulated,
    WorkflowProbeFailed,
    WorkflowStatusObserved,
)
from statemachine.rules import Verdict
from statemachine.vocabulary import FAILURE_RULES

__all__ = ["count_verdict"]

_children: dict[tuple[str, ...], Any] = {}  # labels() is slow: each series' child kept


def _child(metric: Any, *labels: str) -> Any:
    key = (metric._name, *labels)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(*labels)
    return child


def count_verdict(verdict: Verdict | None, decision: AuditEvent | None, event: AuditEvent) -> None:
    """Count the verdict on an observation or a probe failure, and the failure a released
    hold becomes (trigger ``release``); other events: nothing."""
    if isinstance(event, AuditFailureReleased) and isinstance(decision, AuditFailed):
        rule = decision.data.rule or "released"
        _child(DECISIONS, rule, decision.data.error_code, "release", "failed").inc()
        return
    if verdict is None or not isinstance(event, WorkflowStatusObserved | WorkflowProbeFailed):
        return
    if isinstance(decision, AuditFailureHeld):
        code, outcome = decision.data.decision.error_code, "held"
    elif isinstance(decision, AuditFailed):
        code, outcome = decision.data.error_code, "failed"
    elif isinstance(decision, AuditFailureSimulated):
        code, outcome = decision.data.error_code, "shadow"
    else:
        found = "within_grace" if verdict.rule in FAILURE_RULES else verdict.rule
        _child(JUDGED, found).inc()
        return
    _child(DECISIONS, verdict.rule, code, event.data.trigger.value, outcome).inc()
