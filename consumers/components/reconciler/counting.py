"""The reconciler's verdicts in the metrics: a decision is counted under its rule only when it
decided a failure (applied, held by the brake, or simulated in shadow mode); a verdict that
changed nothing is counted by what it found (``healthy``, ``within_grace`` for a lost instance
still inside its grace, ``finalize_pending``, ``not_running``, ...), never under a failure
rule's name.

Counts are kept in plain dictionaries and added to the metrics once a batch
(:func:`flush_counts`): a metric's ``inc`` takes a lock and checks its value, a cost per
observation that a batch of thousands need not pay.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from consumers.runtime.metrics import DECISIONS, DETECTION_SECONDS, JUDGED
from statemachine.events import (
    AuditEvent,
    AuditFailed,
    AuditFailureHeld,
    AuditFailureSimulated,
)
from statemachine.rules import Verdict
from statemachine.vocabulary import FAILURE_RULES

__all__ = ["count_verdict", "flush_counts"]

# labels() is slow (it checks and joins the labels on every call): each series' child kept.
_judged: dict[str, Any] = {}
_decided: dict[tuple[str, str, str, str], Any] = {}
_JUDGED_EVENTS = frozenset({"WorkflowStatusObserved", "WorkflowProbeFailed"})


# Counted since the last flush.
_judged_since: dict[str, int] = {}
_decided_since: dict[tuple[str, str, str, str], int] = {}


def _count_judged(verdict: Verdict) -> None:
    found = "within_grace" if verdict.rule in FAILURE_RULES else verdict.rule
    _judged_since[found] = _judged_since.get(found, 0) + 1


def _count_decided(rule: str, code: str, trigger: str, outcome: str) -> None:
    key = (rule, code, trigger, outcome)
    _decided_since[key] = _decided_since.get(key, 0) + 1


def flush_counts() -> None:
    """Add what was counted since the last flush to the metrics."""
    for found, n in _judged_since.items():
        child = _judged.get(found)
        if child is None:
            child = _judged[found] = JUDGED.labels(found)
        child.inc(n)
    for key, n in _decided_since.items():
        child = _decided.get(key)
        if child is None:
            child = _decided[key] = DECISIONS.labels(*key)
        child.inc(n)
    _judged_since.clear()
    _decided_since.clear()


def _time_to_detection(decision: AuditFailed) -> None:
    """For a failure the event subscription reported: the seconds since the instance ended
    (the message's ``eventTimestamp``), as the decision is made (its row follows within
    milliseconds)."""
    if decision.data.reconciled_by != "subscription":
        return
    reported = (decision.data.policy or {}).get("reported_at")
    if not isinstance(reported, str):
        return
    try:
        took = datetime.now(UTC) - datetime.fromisoformat(reported)
    except (TypeError, ValueError):
        return
    DETECTION_SECONDS.observe(max(took.total_seconds(), 0.0))


def count_verdict(verdict: Verdict | None, decision: AuditEvent | None, event: AuditEvent) -> None:
    """Count (until :func:`flush_counts`) the verdict on an observation or a probe failure, and
    the failure a released hold becomes (trigger ``release``); other events: nothing. Events
    are told apart by their ``type`` (the observation may be a view: see
    :func:`statemachine.rules.judge`), decisions (always models) by their exact class."""
    if event.type == "AuditFailureReleased" and type(decision) is AuditFailed:
        released = decision.data
        _count_decided(released.rule or "released", released.error_code, "release", "failed")
        return
    if verdict is None or event.type not in _JUDGED_EVENTS:
        return
    if decision is None:  # nearly every verdict
        _count_judged(verdict)
        return
    if type(decision) is AuditFailureHeld:
        code, outcome = decision.data.decision.error_code, "held"
    elif type(decision) is AuditFailed:
        code, outcome = decision.data.error_code, "failed"
        _time_to_detection(decision)
    elif type(decision) is AuditFailureSimulated:
        code, outcome = decision.data.error_code, "shadow"
    else:
        _count_judged(verdict)
        return
    trigger = event.data.trigger.value  # type: ignore[union-attr]
    _count_decided(verdict.rule, code, trigger, outcome)
