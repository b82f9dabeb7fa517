"""Backtesting a policy on each backend pair: histories recorded by the real reconciler and
projector, read back from ``audit_events`` and judged again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from consumers.components.projector import Projector
from consumers.components.reconciler import Reconciler
from consumers.operations.backtest import backtest, parse_since
from statemachine.errors import InvalidInput
from statemachine.events import AuditEvent
from statemachine.policy import Policy
from tests.contracts.projection_store import at, completed, observed, started
from tests.pipeline import Pipeline, append, run_until_idle

POLICY = Policy()  # instance_lost_grace 10m, finalize_grace 10m


def lost(audit_id: str, *ages: float, start: float = 0) -> list[AuditEvent]:
    """An audit started at ``start`` whose instance is not found at each age (minutes)."""
    events: list[AuditEvent] = [started(audit_id, at(start))]
    events += [observed(audit_id, "not_found", at(start + age)) for age in ages]
    return events


HISTORIES: dict[str, list[AuditEvent]] = {
    "a-young": lost("a-young", 3),  # below both thresholds
    "a-between": lost("a-between", 7),  # between 5m and 10m: never failed
    "a-between-past": lost("a-between-past", 7, 12),  # failed at 12m; at 7m under 5m
    "a-past": lost("a-past", 12),  # past both thresholds
    "a-healthy": [started("a-healthy"), observed("a-healthy", "running", at(30))],
    "a-oom": [
        started("a-oom"),
        observed("a-oom", "errored", at(20), error="Worker exceeded memory limit"),
    ],
    "a-overturned": lost("a-overturned", 11),  # failed at 11m, then completed (LATER)
    "a-never-observed": [started("a-never-observed")],
    "a-late": lost("a-late", 7, start=600),  # started ten hours later
}

LATER = [completed("a-overturned", at(12))]  # appended after the reconciler's decisions


@pytest.fixture
async def recorded(pipeline: Pipeline) -> Pipeline:
    """The histories above, judged by the reconciler under POLICY and projected."""
    events = [e for history in HISTORIES.values() for e in history]
    await append(pipeline.log, pipeline.topics.lifecycle, events)
    reconciler = Reconciler(pipeline.log, POLICY)
    projector = Projector(pipeline.log, pipeline.store.writer)
    async with reconciler, projector:
        await run_until_idle(reconciler)  # its decisions in the log before what follows
        await append(pipeline.log, pipeline.topics.lifecycle, LATER)
        await run_until_idle(reconciler, projector)
    row = await pipeline.store.audits.get("a-between-past")
    assert row is not None and (row.status, row.state.error_code) == ("failed", "instance_lost")
    row = await pipeline.store.audits.get("a-overturned")
    assert row is not None and (row.status, row.state.overturned) == ("completed", True)
    return pipeline


async def test_the_policy_in_force_reports_no_difference(recorded: Pipeline) -> None:
    result = await backtest(recorded.store.audits, POLICY, [])
    assert result["differences"] == [] and result["summary"] == {}
    assert result["changed"] == {}
    assert result["audits_judged"] == len(HISTORIES) - 1  # the one never observed is skipped


async def test_a_shorter_grace_reports_exactly_the_audits_between_the_thresholds(
    recorded: Pipeline,
) -> None:
    result = await backtest(recorded.store.audits, POLICY, ["INSTANCE_LOST_GRACE=5m"])
    found = {d["audit_id"]: d for d in result["differences"]}
    assert set(found) == {"a-between", "a-between-past", "a-late"}
    assert found["a-between"]["kind"] == "failed"
    assert found["a-between"]["tested"]["failed_at"] == at(7).isoformat()
    assert found["a-between"]["actual"]["status"] == "running"
    assert found["a-between-past"]["kind"] == "failed_earlier"
    assert found["a-between-past"]["delta_s"] == -300.0
    assert result["summary"] == {"instance_lost": {"failed": 2, "failed_earlier": 1}}
    assert result["changed"] == {"instance_lost_grace_s": {"from": 600.0, "to": 300.0}}

    # and --since keeps the audits started since then
    since = await backtest(recorded.store.audits, POLICY, ["INSTANCE_LOST_GRACE=5m"], since=at(60))
    assert [d["audit_id"] for d in since["differences"]] == ["a-late"]
    assert since["audits_judged"] == 1


async def test_a_longer_grace_reports_the_failures_it_would_not_have_made(
    recorded: Pipeline,
) -> None:
    result = await backtest(recorded.store.audits, POLICY, ["AUDITREC_INSTANCE_LOST_GRACE=15m"])
    kinds = {d["audit_id"]: d["kind"] for d in result["differences"]}
    # a-overturned completed at 12m either way, but its failure at 11m would not have been
    assert kinds == {
        "a-between-past": "not_failed",
        "a-past": "not_failed",
        "a-overturned": "not_failed",
    }


async def test_bad_settings_and_times_are_named(recorded: Pipeline) -> None:
    with pytest.raises(InvalidInput, match="GRACE: not a policy setting"):
        await backtest(recorded.store.audits, POLICY, ["GRACE=5m"])
    with pytest.raises(InvalidInput, match="FINALIZE_GRACE=later: not a duration"):
        await backtest(recorded.store.audits, POLICY, ["FINALIZE_GRACE=later"])
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert parse_since("2h", now) == now - timedelta(hours=2)
    assert parse_since("2026-11-30T08:00:00Z", now) == at(0)
    assert parse_since("2026-11-30", now) == datetime(2026, 11, 30, tzinfo=UTC)
    with pytest.raises(InvalidInput, match="invalid since 'yesterday'"):
        parse_since("yesterday", now)
    with pytest.raises(InvalidInput, match="give the time zone"):
        parse_since("2026-11-30T08:00:00", now)
