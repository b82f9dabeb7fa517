"""Backtesting a policy in the core: recorded histories judged again under other thresholds."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from datetime import timedelta

import pytest

from statemachine.backtest import backtest_audit, outcome_of, policy_with, summarise
from statemachine.errors import InvalidInput
from statemachine.events import (
    AuditEvent,
    AuditFailureHeld,
    AuditFailureReleased,
    HeldRelease,
)
from statemachine.policy import Policy
from statemachine.rules import decide, released
from statemachine.state import AuditState, evolve
from tests.statemachine.sm_builders import (
    at,
    completed,
    failed,
    observed,
    progressed,
    started,
)

POLICY = Policy()  # instance_lost_grace 10m, finalize_grace 10m


def reconciled(
    events: Sequence[AuditEvent], policy: Policy = POLICY, *, lag: int = 0, engaged: bool = False
) -> list[AuditEvent]:
    """``events`` with the reconciler's decisions appended as the reconciler appends them
    (``lag``: that many later events land in the log before each decision)."""
    out: list[AuditEvent] = []
    pending: list[tuple[int, AuditEvent]] = []
    state: AuditState | None = None
    holds: dict[str, AuditFailureHeld] = {}
    for i, event in enumerate(events):
        decision: AuditEvent | None
        if isinstance(event, AuditFailureReleased):
            decision = released(state, event, holds.get(str(event.data.held_id)))
        else:
            _, decision = decide(state, event, policy, brake_engaged=engaged)
        state = evolve(state or AuditState(audit_id=event.audit_id), event)
        out.append(event)
        if decision is not None:
            state = evolve(state, decision)
            if isinstance(decision, AuditFailureHeld):
                holds[str(decision.event_id)] = decision
            pending.append((i + lag, decision))
        out.extend(d for due, d in pending if due <= i)
        pending = [(due, d) for due, d in pending if due > i]
    return out + [d for _, d in pending]


def grace(minutes: float) -> Policy:
    return dataclasses.replace(POLICY, instance_lost_grace=timedelta(minutes=minutes))


def lost_at(*minutes: float, audit_id: str = "a-1") -> list[AuditEvent]:
    """An audit started at T0 whose instance is reported not found at each age given."""
    history: list[AuditEvent] = [started(audit_id=audit_id)]
    for m in minutes:
        history.append(observed("not_found", when=at(m), audit_id=audit_id))
    return history


HISTORIES: dict[str, list[AuditEvent]] = {
    "lost_past_grace": lost_at(4, 12),
    "lost_within_grace": lost_at(3),
    "errored": [started(), observed("errored", when=at(20), error="Execution timed out")],
    "finalize_lost": [started(), observed("complete", when=at(30), ended=at(15))],
    "healthy": [started(), observed("running", when=at(16)), progressed(when=at(17))],
    "overturned": [started(), *lost_at(12)[1:], completed(when=at(13))],
    "failed_by_workflow": [
        started(),
        failed(when=at(5), code="oom"),
        observed("errored", when=at(20)),
    ],
}


@pytest.mark.parametrize("lag", [0, 2])
@pytest.mark.parametrize("name", list(HISTORIES))
def test_under_the_policy_recorded_every_audit_ends_as_it_did(name: str, lag: int) -> None:
    # given a history the reconciler recorded under the policy in force (its decisions
    # landing in the log right after their cause, or a few events later)
    history = reconciled(HISTORIES[name], lag=lag)
    # when it is backtested under that very policy
    # then nothing would have ended differently
    assert backtest_audit("a-123", history, POLICY) is None


def test_a_shorter_grace_fails_exactly_the_audits_observed_between_the_thresholds() -> None:
    # given audits observed not found at various ages, recorded under a 10m grace
    audits = {
        "young": lost_at(3, audit_id="young"),  # below both thresholds
        "between": lost_at(7, audit_id="between"),  # between 5m and 10m: never failed
        "between_then_past": lost_at(7, 12, audit_id="between_then_past"),  # failed at 12m
        "past": lost_at(12, audit_id="past"),  # past both thresholds
        "exactly_5m": lost_at(5, audit_id="exactly_5m"),  # age ≥ grace fails
    }
    found = {a: backtest_audit(a, reconciled(events), grace(5)) for a, events in audits.items()}
    # then: those between the thresholds fail under 5m, at the observation between them
    assert {a for a, d in found.items() if d is not None} == {
        "between",
        "between_then_past",
        "exactly_5m",
    }
    between = found["between"]
    assert between is not None and between.kind == "failed" and between.rule == "instance_lost"
    assert between.tested.failed_at == at(7) and between.actual.status == "running"
    earlier = found["between_then_past"]
    assert earlier is not None and earlier.kind == "failed_earlier"
    assert earlier.delta == timedelta(minutes=-5)
    assert (earlier.actual.failed_at, earlier.tested.failed_at) == (at(12), at(7))


def test_a_longer_grace_would_not_have_failed_an_audit_lost_in_between() -> None:
    history = reconciled(lost_at(12))
    difference = backtest_audit("a-1", history, grace(15))
    assert difference is not None and difference.kind == "not_failed"
    assert difference.rule == "instance_lost"
    assert difference.actual.error_code == "instance_lost" and difference.tested.status == "running"
    assert backtest_audit("a-1", reconciled(lost_at(12, 16)), grace(15)).kind == "failed_later"  # type: ignore[union-attr]


def test_another_rule_firing_first_gives_another_code() -> None:
    # given a workflow complete at 15m, seen at 20m (< 10m finalize grace), then errored
    history = reconciled(
        [
            started(),
            observed("complete", when=at(20), ended=at(15)),
            observed("errored", when=at(40), error="Worker exceeded memory limit"),
        ]
    )
    assert outcome_of("a-123", history).error_code == "oom"
    policy = dataclasses.replace(POLICY, finalize_grace=timedelta(minutes=2))
    difference = backtest_audit("a-123", history, policy)
    assert difference is not None and difference.kind == "other_code"
    assert (difference.actual.error_code, difference.tested.error_code) == ("oom", "finalize_lost")
    assert difference.rule == "finalize_lost" and difference.delta == timedelta(minutes=-20)


def test_shadow_mode_fails_nothing() -> None:
    history = reconciled(HISTORIES["errored"])
    difference = backtest_audit("a-123", history, policy_with(POLICY, ["MODE=shadow"]))
    assert difference is not None and difference.kind == "not_failed"
    assert difference.tested.status == "running"


def _held_then_released() -> list[AuditEvent]:
    """A large sweep's instance_lost decision held, then released by its verdict at 13m."""
    obs = observed("not_found", when=at(12), sweep_size=50, event_id=uuid.uuid4())
    history = reconciled([started(), obs])
    (hold,) = [e for e in history if isinstance(e, AuditFailureHeld)]
    release = AuditFailureReleased(
        event_id=uuid.uuid4(),
        audit_id=hold.audit_id,
        occurred_at=at(13),
        producer="auditrec-watchdog",
        data=HeldRelease(held_id=hold.event_id, actor="watchdog", reason=None),
    )
    return reconciled([started(), obs, release])


def test_held_decisions_are_held_and_released_as_recorded() -> None:
    history = _held_then_released()
    actual = outcome_of("a-123", history)
    assert (actual.status, actual.error_code, actual.failed_at) == (
        "failed",
        "instance_lost",
        at(13),
    )
    assert backtest_audit("a-123", history, POLICY) is None
    # without the brake, the failure would have been applied at the observation
    difference = backtest_audit("a-123", history, policy_with(POLICY, ["BRAKE_MIN_AUDITS=0"]))
    assert difference is not None and difference.kind == "failed_earlier"
    assert difference.delta == timedelta(minutes=-1)


def test_settings_are_named_as_configured_and_checked() -> None:
    policy = policy_with(
        POLICY,
        ["INSTANCE_LOST_GRACE=5m", "auditrec_finalize_grace=90s", "AUDITREC_BRAKE_MIN_SHARE=0.7"],
    )
    assert policy.instance_lost_grace == timedelta(minutes=5)
    assert policy.finalize_grace == timedelta(seconds=90)
    assert policy.brake_min_share == 0.7
    assert policy_with(POLICY, []) == POLICY
    for bad, named in [
        ("GRACE=5m", "GRACE: not a policy setting"),
        ("INSTANCE_LOST_GRACE=soon", "INSTANCE_LOST_GRACE=soon: not a duration"),
        ("INSTANCE_LOST_GRACE", "expected NAME=VALUE"),
        ("MODE=loud", "MODE=loud: enforce or shadow"),
        ("BRAKE_MIN_AUDITS=-1", "BRAKE_MIN_AUDITS=-1"),
        ("BRAKE_MIN_SHARE=2", "a share between 0 and 1"),
    ]:
        with pytest.raises(InvalidInput, match=named):
            policy_with(POLICY, [bad])


def test_the_summary_counts_per_rule_and_kind() -> None:
    differences = [
        backtest_audit(a, reconciled(lost_at(*ages, audit_id=a)), grace(5))
        for a, ages in [("x", (7,)), ("y", (8,)), ("z", (7, 12))]
    ]
    assert summarise(d for d in differences if d is not None) == {
        "instance_lost": {"failed": 2, "failed_earlier": 1}
    }
