"""Backtesting a policy: how recorded audits would have ended under other thresholds.

Each audit's history is replayed through the core as the reconciler runs it: every event is
folded; every observation (and every release of a held decision) is judged by :func:`decide`
under the policy tested, and the decision folded at once; the reconciler's recorded decisions
are left out, since they are what is being re-judged. The audit's end under the policy tested
is then the fold of that history with the new decisions in place of the old ones; what
actually happened is the fold of the recorded history. A decision the policy tested makes
exactly as recorded has the recorded decision's id (ids derive from the observation) and takes
its place in the log, so under the recorded policy the two folds are the same history.

The brake is not re-judged (a sweep's verdict needs the whole sweep): a decision the brake
held is held again, and released or discarded as it was; any other decision is applied at
once, as after a sweep the brake let through. Pure: no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from statemachine.errors import InvalidInput
from statemachine.events import (
    AuditEvent,
    AuditFailed,
    AuditFailureHeld,
    AuditFailureReleased,
    AuditFailureSimulated,
    FailedBy,
    Progress,
    WorkflowStatusObserved,
    WorkflowTerminationRequested,
)
from statemachine.policy import Policy, format_duration, parse_duration
from statemachine.rules import PRODUCER, decide, released
from statemachine.state import AuditState, evolve
from statemachine.vocabulary import STALL_STATUSES

__all__ = [
    "SETTINGS",
    "Difference",
    "Outcome",
    "backtest_audit",
    "outcome_of",
    "policy_with",
    "rejudged",
    "summarise",
]

Kind = Literal["failed_earlier", "failed_later", "not_failed", "failed", "other_code"]

# The policy's settings as configured (AUDITREC_<NAME>), with what each does in a backtest.
SETTINGS: Mapping[str, str] = {
    "INSTANCE_LOST_GRACE": "judged again: not_found / not_attached fail past this age",
    "FINALIZE_GRACE": "judged again: a complete workflow fails finalize_lost past this",
    "MODE": "judged again: in shadow mode nothing fails",
    "BRAKE_MIN_AUDITS": "0 turns the brake off (held decisions apply at once); otherwise "
    "holds are replayed as recorded",
    "BRAKE_MIN_SHARE": "not judged again: a sweep's verdict needs the whole sweep",
    "STALE_RUNNING_AFTER": "not judged again: it picks which audits are probed, and the "
    "observations are the recorded ones",
    "STALLED_AFTER": "judged again on when auditrec recorded each audit's progress: a running "
    "or queued observation that long after it is a stall, counted as the audit failing stalled "
    "then (as with AUDITREC_STALLED_ACTION=terminate); 0 turns stalls off",
}


def _setting(name: str, value: str, policy: Policy) -> Policy:
    try:
        if name == "STALLED_AFTER":
            return dataclasses.replace(
                policy,
                stalled_after=parse_duration(value),
                stalled_action="terminate",
                terminate_workflows=policy.terminate_workflows | {policy.default_workflow},
            )
        if name in ("INSTANCE_LOST_GRACE", "FINALIZE_GRACE", "STALE_RUNNING_AFTER"):
            changes: dict[str, Any] = {name.lower(): parse_duration(value)}
            return dataclasses.replace(policy, **changes)
        if name == "MODE":
            if value not in ("enforce", "shadow"):
                raise ValueError("enforce or shadow")
            return dataclasses.replace(policy, shadow=value == "shadow")
        if name == "BRAKE_MIN_AUDITS":
            count = int(value)
            if count < 0:
                raise ValueError("a count of 0 or more")
            return dataclasses.replace(policy, brake_min_audits=count)
        share = float(value)
        if not 0.0 <= share <= 1.0:
            raise ValueError("a share between 0 and 1")
        return dataclasses.replace(policy, brake_min_share=share)
    except ValueError as exc:
        raise InvalidInput(f"--set {name}={value}: {exc}") from None


def policy_with(base: Policy, assignments: Iterable[str]) -> Policy:
    """``base`` with ``NAME=VALUE`` assignments applied (names as configured, the
    ``AUDITREC_`` prefix optional, any case; durations as ``5m``); an unknown name or a bad
    value is :class:`InvalidInput` naming it."""
    policy = base
    for text in assignments:
        name, sep, value = text.partition("=")
        key = name.strip().upper().removeprefix("AUDITREC_")
        if not sep or not key:
            raise InvalidInput(f"--set {text!r}: expected NAME=VALUE (e.g. INSTANCE_LOST_GRACE=5m)")
        if key not in SETTINGS:
            known = ", ".join(SETTINGS)
            raise InvalidInput(f"--set {name.strip()}: not a policy setting (one of: {known})")
        policy = _setting(key, value.strip(), policy)
    return policy


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an audit ended: its status, and the failure applied to it, if any (kept when a
    later completion overturned it)."""

    status: str
    error_code: str | None = None
    failed_at: datetime | None = None
    failed_by: str | None = None
    rule: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "error_code": self.error_code,
            "failed_at": self.failed_at.isoformat() if self.failed_at else None,
            "failed_by": self.failed_by,
            "rule": self.rule,
        }


@dataclass(frozen=True, slots=True)
class Difference:
    audit_id: str
    kind: Kind
    rule: str
    actual: Outcome
    tested: Outcome
    delta: timedelta | None = None  # tested failure time − actual failure time

    def as_dict(self) -> dict[str, Any]:
        return {
            "audit_id": self.audit_id,
            "kind": self.kind,
            "rule": self.rule,
            "delta_s": self.delta.total_seconds() if self.delta is not None else None,
            "delta": format_duration(self.delta) if self.delta is not None else None,
            "actual": self.actual.as_dict(),
            "tested": self.tested.as_dict(),
        }


def outcome_of(audit_id: str, events: Iterable[AuditEvent]) -> Outcome:
    """Fold ``events``, noting the failure that moved the audit from running to failed."""
    state = AuditState(audit_id=audit_id)
    failure: AuditFailed | None = None
    for event in events:
        after = evolve(state, event)
        if isinstance(event, AuditFailed) and state.status != "failed" == after.status:
            failure = event
        state = after
    if failure is None:
        return Outcome(state.status)
    d = failure.data
    return Outcome(state.status, d.error_code, failure.occurred_at, d.failed_by.value, d.rule)


def _own_decision(event: AuditEvent) -> bool:
    """A decision of the reconciler's (what a backtest judges again)."""
    if isinstance(event, AuditFailureHeld | WorkflowTerminationRequested):
        return event.producer == PRODUCER
    if isinstance(event, AuditFailed | AuditFailureSimulated):
        return event.data.failed_by is FailedBy.RECONCILER
    return False


def _stall_checked(
    event: AuditEvent,
    state: AuditState | None,
    policy: Policy,
    recorded_at: Mapping[uuid.UUID, datetime],
) -> AuditEvent:
    """An observation of a live instance as a stall check would have read it: with the
    audit's latest progress and when auditrec recorded it (when the history knows)."""
    if not policy.stalls_on or not isinstance(event, WorkflowStatusObserved):
        return event
    d = event.data
    if d.progress is not None or d.status not in STALL_STATUSES or d.source == "subscription":
        return event
    if state is None or state.progress_event_id is None:
        return event
    progress_id = uuid.UUID(state.progress_event_id)
    at = recorded_at.get(progress_id)
    if at is None:
        return event
    progress = Progress(event_id=progress_id, recorded_at=at)
    return event.model_copy(
        update={"data": d.model_copy(update={"progress": progress, "source": "instance"})}
    )


def _as_failure(decision: AuditEvent) -> AuditEvent:
    """A termination request as the failure it leads to (its termination is not in the
    history: a backtest counts the stall as the audit failing then)."""
    if not isinstance(decision, WorkflowTerminationRequested):
        return decision
    return AuditFailed(
        event_id=decision.event_id,
        audit_id=decision.audit_id,
        occurred_at=decision.occurred_at,
        producer=decision.producer,
        causation_id=decision.causation_id,
        data=decision.data.decision,
    )


def rejudged(
    events: Sequence[AuditEvent],
    policy: Policy,
    recorded_at: Mapping[uuid.UUID, datetime] | None = None,
) -> list[AuditEvent]:
    """The history with the reconciler's decisions made again under ``policy``: each new
    decision at the place of the recorded one it repeats (same id and time), else right after
    its cause. ``recorded_at``: when auditrec recorded each event, by id (stalls are judged
    on it)."""
    recorded_times = recorded_at or {}
    recorded = {e.event_id: (i, e.occurred_at) for i, e in enumerate(events) if _own_decision(e)}
    skipped = {i for i, _ in recorded.values()}
    held_then = {
        e.causation_id for e in events if isinstance(e, AuditFailureHeld) and _own_decision(e)
    }
    unbraked = dataclasses.replace(policy, brake_min_audits=0)
    placed: list[tuple[int, int, AuditEvent]] = []
    state: AuditState | None = None
    holds: dict[str, AuditFailureHeld] = {}
    for i, event in enumerate(events):
        if i in skipped:
            continue
        decision: AuditEvent | None
        if isinstance(event, AuditFailureReleased):
            decision = released(state, event, holds.get(str(event.data.held_id)))
        else:
            held = event.event_id in held_then and policy.brake_on
            judged = _stall_checked(event, state, policy, recorded_times)
            _, decision = decide(state, judged, policy if held else unbraked, brake_engaged=held)
            if decision is not None:
                decision = _as_failure(decision)
        state = evolve(state or AuditState(audit_id=event.audit_id), event)
        placed.append((i, 0, event))
        if decision is not None:
            state = evolve(state, decision)
            if isinstance(decision, AuditFailureHeld):
                holds[str(decision.event_id)] = decision
            place, when = recorded.get(decision.event_id, (i, decision.occurred_at))
            placed.append((place if when == decision.occurred_at else i, 1, decision))
    placed.sort(key=lambda item: (item[0], item[1]))
    return [event for _, _, event in placed]


def _compare(audit_id: str, actual: Outcome, tested: Outcome) -> Difference | None:
    if actual.failed_at is None and tested.failed_at is None:
        return None
    rule = tested.rule or actual.rule or f"by {(tested.failed_by or actual.failed_by)}"
    if tested.failed_at is None:
        return Difference(audit_id, "not_failed", actual.rule or rule, actual, tested)
    if actual.failed_at is None:
        return Difference(audit_id, "failed", rule, actual, tested)
    delta = tested.failed_at - actual.failed_at
    if tested.error_code != actual.error_code:
        return Difference(audit_id, "other_code", rule, actual, tested, delta)
    if delta:
        kind: Kind = "failed_earlier" if delta < timedelta(0) else "failed_later"
        return Difference(audit_id, kind, rule, actual, tested, delta)
    return None


def backtest_audit(
    audit_id: str,
    events: Sequence[AuditEvent],
    policy: Policy,
    recorded_at: Mapping[uuid.UUID, datetime] | None = None,
) -> Difference | None:
    """How ``audit_id`` would have ended differently under ``policy``; ``None``: the same.
    ``recorded_at``: when auditrec recorded each event, by id (stalls are judged on it)."""
    if not any(isinstance(e, WorkflowStatusObserved) or _own_decision(e) for e in events):
        return None  # nothing the reconciler judged
    actual = outcome_of(audit_id, events)
    tested = outcome_of(audit_id, rejudged(events, policy, recorded_at))
    return _compare(audit_id, actual, tested)


def summarise(differences: Iterable[Difference]) -> dict[str, dict[str, int]]:
    """Per rule, how many audits ended differently, by kind."""
    out: dict[str, dict[str, int]] = {}
    for d in differences:
        per_rule = out.setdefault(d.rule, {})
        per_rule[d.kind] = per_rule.get(d.kind, 0) + 1
    return dict(sorted(out.items()))
