"""The audit page's presentation, pure: the timeline's collapsing, the row's labelled fields,
the failure's summary, and the console's timestamp filters."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest

from consumers.api.ui.auditview import Group, failure_summary, fields, stall_summary, timeline
from consumers.api.ui.render import TEMPLATES, ago, when
from projections.row import COLUMNS, AuditRow
from statemachine.audit import AuditState
from statemachine.events import WorkflowTerminationRequested
from statemachine.explain import explain
from statemachine.policy import Policy
from statemachine.state import fold
from tests.consumers.api.ui.audit_histories import (
    AGAIN,
    HEALTHY,
    failed_by_the_watchdog,
    healthy_then_held,
)
from tests.contracts.projection_store import observed, probe_failed, progressed, stall, started

T0 = datetime(2026, 12, 6, 1, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)


def shape(entries: list) -> list[tuple[str, ...]]:
    return [
        ("group", e.kind, e.rule, str(e.count)) if isinstance(e, Group) else ("step", str(e[0]))
        for e in entries
    ]


def test_healthy_runs_collapse_with_their_count_and_span_and_the_rest_stays() -> None:
    # given a start, 14 healthy observations 5 min apart, then the held stretch
    history = healthy_then_held("a-1", T0, "wf-1")
    steps = explain(history, Policy())

    # when the timeline is made
    entries = timeline(steps)

    # then the healthy ones are one group, the hold's cause and the hold are steps, the later
    # sweeps (no second decision) one held group; every step is in it, numbered in order
    assert shape(entries) == [
        ("step", "1"),
        ("group", "quiet", "healthy", str(HEALTHY)),
        ("step", str(HEALTHY + 2)),
        ("step", str(HEALTHY + 3)),
        ("group", "held", "instance_lost", str(AGAIN)),
    ]
    quiet, held = entries[1], entries[4]
    assert isinstance(quiet, Group) and isinstance(held, Group)
    assert quiet.label == "healthy" and quiet.span == "01:05–02:10"
    assert held.label == "instance lost while held, no second decision"
    numbers = [n for e in entries for n, _ in (e.steps if isinstance(e, Group) else [e])]
    assert numbers == list(range(1, len(steps) + 1))


def test_a_lone_observation_and_differing_rules_do_not_collapse() -> None:
    history = [
        started("a-1", T0),
        observed("a-1", "running", T0 + MIN),
        probe_failed("a-1", T0 + 2 * MIN),
        probe_failed("a-1", T0 + 3 * MIN),
        observed("a-1", "running", T0 + 4 * MIN),
        observed("a-1", "not_found", T0 + 5 * MIN),  # within the grace: no change
        observed("a-1", "not_found", T0 + 6 * MIN),
    ]
    entries = timeline(explain(history, Policy()))

    assert shape(entries) == [
        ("step", "1"),
        ("step", "2"),
        ("group", "quiet", "probe_failed", "2"),
        ("step", "5"),
        ("group", "quiet", "instance_lost", "2"),
    ]
    assert entries[4].label == "instance lost, no change"  # type: ignore[union-attr]
    assert shape(timeline(explain(history, Policy()), least=3)) == [
        ("step", str(n)) for n in range(1, 8)
    ]


def test_a_span_across_days_names_the_dates() -> None:
    late = datetime(2026, 12, 5, 23, 55, tzinfo=UTC)
    history = [
        started("a-1", late),
        observed("a-1", "running", late + 1 * MIN),
        observed("a-1", "running", late + 10 * MIN),
    ]
    group = timeline(explain(history, Policy()))[1]
    assert isinstance(group, Group)
    assert group.span == "2026-12-05 23:56–2026-12-06 00:05"


def test_the_row_is_labelled_fields_with_readable_values() -> None:
    state = fold(failed_by_the_watchdog("a-1", T0, "wf-1"))
    assert state is not None
    shown = {f.column: (f.label, f.text) for f in fields(AuditRow(state, version=4))}

    assert list(shown) == list(COLUMNS)
    assert shown["overturned"] == ("Overturned", "no")
    assert shown["completed_at"] == ("Completed at", "—")
    assert shown["failed_by"] == ("Failed by", "reconciler")
    assert shown["last_observed_status"] == ("Last observed status", "running")
    assert shown["error_code"] == ("Error code", "instance_lost")  # exact: it is searched for
    assert shown["workflow_instance_id"] == ("Workflow instance", "wf-1")
    assert shown["version"] == ("Events applied", "4")


def test_the_failure_summary_names_code_reason_rule_who_and_when() -> None:
    history = failed_by_the_watchdog("a-1", T0, "wf-1")
    state = fold(history)
    assert state is not None
    summary = failure_summary(AuditRow(state), explain(history, Policy()))

    assert summary is not None
    assert (summary["code"], summary["detail"], summary["rule"]) == (
        "instance_lost",
        "instance_lost detail",
        "instance_lost",
    )
    assert summary["who"] == "reconciler (found by the watchdog)"
    assert summary["at"] == T0 + timedelta(hours=1)
    running = fold(history[:2])
    assert running is not None and failure_summary(AuditRow(running), []) is None


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (datetime(2026, 12, 6, 12, 34, 56, 789, tzinfo=UTC), "2026-12-06 12:34:56Z"),
        (
            datetime(2026, 12, 6, 14, 34, 56, tzinfo=timezone(timedelta(hours=2))),
            "2026-12-06 12:34:56Z",
        ),
        (datetime(2026, 12, 6, 12, 34, 56), "2026-12-06 12:34:56Z"),  # naive: UTC
        ("2026-12-06T12:34:56.5+00:00", "2026-12-06 12:34:56Z"),
        ("2026-12-06T12:34:56Z", "2026-12-06 12:34:56Z"),
        (None, "-"),
        ("not a time", "not a time"),
    ],
)
def test_every_timestamp_is_shown_in_one_format(value: object, shown: str) -> None:
    assert when(value) == shown  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("before", "shown"),
    [
        (timedelta(seconds=2), "just now"),
        (timedelta(seconds=45), "45 s ago"),
        (timedelta(minutes=3, seconds=10), "3 min ago"),
        (timedelta(hours=2), "2 h ago"),
        (timedelta(hours=2, minutes=5), "2 h 5 min ago"),
        (timedelta(days=3, hours=4, minutes=1), "3 d 4 h ago"),
        (-timedelta(minutes=3), "in 3 min"),
    ],
)
def test_relative_times(before: timedelta, shown: str) -> None:
    assert ago(T0 - before, T0) == shown


def test_the_timestamp_filter_renders_a_time_element_relative_to_the_pages_now() -> None:
    template = TEMPLATES.env.from_string("{{ at|timestamp }}")
    html = template.render(at=T0, now=T0 + timedelta(minutes=3))
    assert html == (
        '<time datetime="2026-12-06T01:00:00Z" title="3 min ago">2026-12-06 01:00:00Z</time> '
        '<span class="ago">3 min ago</span>'
    )
    assert template.render(at=None) == "-"
    assert template.render(at="<b>") == "&lt;b&gt;"


def test_the_workflow_field_names_the_default_when_the_audit_names_none() -> None:
    plain = fold([started("a-1", T0)])
    named = fold([started("a-2", T0, workflow="keyword-research")])
    assert plain is not None and named is not None

    def workflow(state: AuditState) -> tuple[str, str]:
        [field] = [f for f in fields(AuditRow(state), "site-audit") if f.column == "workflow"]
        return field.label, field.text

    assert workflow(plain) == ("Workflow", "site-audit")
    assert workflow(named) == ("Workflow", "keyword-research")  # exact: a name


def test_the_stall_summary_gives_the_verdicts_detail_and_evidence() -> None:
    # given a running audit with a stall verdict reported, an earlier one cleared by progress
    history = [
        started("a-1", T0),
        stall("a-1", T0 + 10 * MIN),
        progressed("a-1", T0 + 20 * MIN, pages_crawled=3),
        stall("a-1", T0 + 80 * MIN),
    ]
    state = fold(history)
    assert state is not None and state.stalled_at == T0 + 80 * MIN
    summary = stall_summary(AuditRow(state), explain(history, Policy()))

    # then it is the latest verdict's, since it was recorded, with its evidence labelled
    assert summary is not None
    assert summary["at"] == T0 + 80 * MIN
    assert summary["detail"].startswith("No progress for 50m")
    assert [(key, label) for key, label, _ in summary["evidence"]] == [
        ("progress_recorded_at", "Last progress recorded at")
    ]
    assert summary["evidence"][0][2] == T0 + 30 * MIN  # a time, for the page to format
    assert summary["terminating"] is False
    # and an audit whose progress came after the verdict has none
    moving = fold(history[:3])
    assert (
        moving is not None
        and stall_summary(AuditRow(moving), explain(history[:3], Policy())) is None
    )


def test_the_stall_summary_of_a_termination_requested_says_so() -> None:
    # given a stall verdict whose instance auditrec asked Workflows to terminate
    verdict = stall("a-1", T0 + 60 * MIN).data.model_copy(
        update={
            "policy": {
                "progress_recorded_at": (T0 + 10 * MIN).isoformat(),
                "step": "crawl-page",
                "step_attempts": 7,
                "step_retrying": True,
                "stalled_after_s": 2700.0,
            }
        }
    )
    request = WorkflowTerminationRequested(
        event_id=uuid.uuid4(),
        audit_id="a-1",
        occurred_at=T0 + 60 * MIN,
        producer="auditrec-reconciler",
        data={"workflow_instance_id": "wf-1", "workflow": "site-audit", "decision": verdict},
    )
    history = [started("a-1", T0), request]
    state = fold(history)
    assert state is not None and state.termination_requested_at == T0 + 60 * MIN

    summary = stall_summary(AuditRow(state), explain(history, Policy()))

    assert summary is not None and summary["terminating"] is True
    assert summary["termination_requested_at"] == T0 + 60 * MIN
    shown = {key: value for key, _, value in summary["evidence"]}
    assert shown == {
        "progress_recorded_at": T0 + 10 * MIN,
        "step": "crawl-page",
        "step_attempts": 7,
        "step_retrying": "yes",
        "stalled_after_s": "45m",
    }
