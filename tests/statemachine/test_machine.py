"""The lifecycle table (DESIGN §4): every row through ``evolve``/``fold``, the table's
validation, and its mermaid rendering."""

from __future__ import annotations

import pytest

from statemachine import machine
from statemachine.machine import (
    INITIAL,
    STATES,
    TERMINAL,
    TRANSITIONS,
    TRIGGERS,
    TableRow,
    mermaid,
    next_status,
)
from statemachine.state import AuditState, evolve, fold
from tests.statemachine.sm_builders import (
    INSTANCE,
    T0,
    TERMINAL_HISTORIES,
    at,
    attached,
    completed,
    failed,
    observed,
    probe_failed,
    progressed,
    running,
    simulated,
    started,
    state_of,
)

# What an observation may still refresh on an audit whose lifecycle no longer changes.
OBSERVATION_FIELDS = {"last_observed_status", "last_observed_at", "instance_ended_at"}


def lifecycle(state: AuditState) -> dict[str, object]:
    """Every field of the state except the observation bookkeeping."""
    return {f: getattr(state, f) for f in state._fields if f not in OBSERVATION_FIELDS}


# --- (none) + AuditStarted ------------------------------------------------------------------


def test_audit_started_creates_a_running_audit_with_defaults_from_the_envelope() -> None:
    # given no audit yet
    # when it starts without started_at or current_phase
    state = state_of(started(when=at(2), organization_id="o-1", pages_total=40))

    # then it is running, started at the event's time, in the discovery phase
    assert state.status == "running"
    assert state.exists
    assert state.project_id == "p-1"
    assert state.organization_id == "o-1"
    assert state.workflow_instance_id == INSTANCE
    assert state.started_at == at(2)
    assert state.current_phase == "discovery"
    assert state.pages_total == 40
    assert state.pages_crawled is None
    assert state.error_code is None
    assert state.overturned is False


def test_audit_started_takes_explicit_started_at_and_phase() -> None:
    state = state_of(
        started(
            when=at(5),
            started_at=T0,
            current_phase="crawl",
            started_by_user_id="u-1",
            start_url="https://example.com/",
        )
    )

    assert state.started_at == T0
    assert state.current_phase == "crawl"
    assert state.started_by_user_id == "u-1"
    assert state.start_url == "https://example.com/"


def test_a_second_audit_started_for_a_known_audit_is_recorded_not_applied() -> None:
    # given a running audit with progress
    before = running(phase="analysis")

    # when another AuditStarted arrives with different data
    after = evolve(
        before,
        started(when=at(9), instance="wf-other", project_id="p-2", current_phase="discovery"),
    )

    # then nothing changes
    assert after == before
    assert next_status("running", "AuditStarted") is None


@pytest.mark.parametrize("history", list(TERMINAL_HISTORIES), ids=str)
def test_a_second_audit_started_does_not_restart_a_terminal_audit(history: str) -> None:
    before = state_of(*TERMINAL_HISTORIES[history])

    after = evolve(before, started(when=at(30), project_id="p-2"))

    assert after == before


@pytest.mark.parametrize(
    "event",
    [
        attached("wf-2"),
        progressed(phase="crawl", crawled=1),
        completed(),
        failed(),
        observed("errored"),
        probe_failed(),
        simulated(),
    ],
    ids=lambda e: e.type,
)
def test_events_before_audit_started_are_recorded_not_applied(event) -> None:
    # given no audit
    empty = AuditState(audit_id="a-123")

    # when anything but AuditStarted arrives first
    after = evolve(empty, event)

    # then there is still no audit
    assert after == empty
    assert not after.exists
    assert fold([event]) == empty
    assert next_status(INITIAL, event.type) is None


def test_fold_of_nothing_is_no_audit() -> None:
    assert fold([]) is None


# --- running + WorkflowInstanceAttached / AuditProgressed -----------------------------------


def test_attaching_an_instance_keeps_the_audit_running_and_records_the_id() -> None:
    # given an audit started without an instance
    before = state_of(started(instance=None))

    # when the instance is attached
    after = evolve(before, attached("wf-9", when=at(1)))

    # then it is still running, with the id
    assert after.status == "running"
    assert after.workflow_instance_id == "wf-9"
    assert (
        after._replace(workflow_instance_id=None, progress_event_id=before.progress_event_id)
        == before
    )


def test_attaching_a_new_instance_forgets_what_was_observed_of_the_old_one() -> None:
    # given the old instance was seen complete
    before = evolve(running(), observed("complete", when=at(3)))
    assert before.instance_ended_at == at(3)

    # when a new instance is attached (e.g. a restart)
    after = evolve(before, attached("wf-2", when=at(4)))

    # then its completion time and status are not inherited
    assert after.workflow_instance_id == "wf-2"
    assert after.instance_ended_at is None
    assert after.last_observed_status is None
    assert after.status == "running"


def test_reattaching_the_same_instance_changes_nothing() -> None:
    before = evolve(running(), observed("complete", when=at(3)))

    after = evolve(before, attached(INSTANCE, when=at(4)))

    assert after._replace(progress_event_id=before.progress_event_id) == before


def test_progress_keeps_the_audit_running_and_updates_phase_and_counters() -> None:
    # given a running audit
    before = running(phase="crawl")

    # when it progresses
    after = evolve(before, progressed(when=at(2), phase="analysis", crawled=7, total=12))

    # then phase and counters follow
    assert after.status == "running"
    assert (after.current_phase, after.pages_crawled, after.pages_total) == ("analysis", 7, 12)


def test_partial_progress_keeps_the_fields_it_does_not_mention() -> None:
    before = running(phase="crawl")  # 3 of 10 pages

    after = evolve(before, progressed(when=at(2), crawled=5))

    assert (after.current_phase, after.pages_crawled, after.pages_total) == ("crawl", 5, 10)


@pytest.mark.parametrize("history", list(TERMINAL_HISTORIES), ids=str)
def test_progress_after_a_terminal_state_never_overwrites_phase_or_counters(history: str) -> None:
    # given a terminal audit
    before = state_of(*TERMINAL_HISTORIES[history])

    # when late progress and a late attachment arrive
    after = evolve(before, progressed(when=at(30), phase="late", crawled=999, total=999))
    after = evolve(after, attached("wf-late", when=at(31)))

    # then nothing moved
    assert after == before
    assert after.current_phase == "discovery"


# --- running + AuditCompleted / AuditFailed -------------------------------------------------


def test_a_running_audit_that_completes_is_completed() -> None:
    # given a running audit
    before = running()

    # when it completes
    after = evolve(before, completed(when=at(20), crawled=10, total=10))

    # then it is completed at the event's time, with final counters, not overturned
    assert after.status == "completed"
    assert after.completed_at == at(20)
    assert (after.pages_crawled, after.pages_total) == (10, 10)
    assert after.overturned is False
    assert after.error_code is None


def test_completion_takes_an_explicit_completed_at() -> None:
    after = evolve(running(), completed(when=at(20), completed_at=at(19)))

    assert after.completed_at == at(19)


def test_completion_without_counters_keeps_the_last_progress() -> None:
    after = evolve(running(), completed(when=at(20)))

    assert (after.pages_crawled, after.pages_total) == (3, 10)


@pytest.mark.parametrize("by", ["workflow", "reconciler", "operator"])
def test_a_running_audit_that_fails_is_failed(by: str) -> None:
    # given a running audit in the crawl phase
    before = running(phase="crawl")

    # when it fails
    after = evolve(
        before, failed(when=at(20), by=by, code="oom", detail="Worker exceeded memory limit")
    )

    # then it is failed with the failure's details
    assert after.status == "failed"
    assert after.error_code == "oom"
    assert after.error_detail == "Worker exceeded memory limit"
    assert after.failed_by == by
    assert after.failed_phase == "crawl"  # defaulted to the current phase
    assert (after.failed_at, after.completed_at) == (at(20), None)  # a failure completes nothing
    assert (after.current_phase, after.pages_crawled, after.pages_total) == ("crawl", 3, 10)


def test_a_failure_keeps_its_explicit_phase_and_reconciler() -> None:
    after = evolve(
        running(phase="crawl"),
        failed(when=at(20), by="reconciler", phase="render", reconciled_by="on_demand"),
    )

    assert after.failed_phase == "render"
    assert after.reconciled_by == "on_demand"


# --- failed + AuditCompleted ------------------------------------------------------------------


def test_completion_overturns_a_failure_by_the_reconciler() -> None:
    # given an audit the reconciler failed
    before = evolve(
        running(phase="crawl"),
        failed(when=at(20), by="reconciler", code="finalize_lost", reconciled_by="watchdog"),
    )
    assert before.status == "failed"

    # when the workflow's completion arrives after all
    after = evolve(before, completed(when=at(21), crawled=10, total=10))

    # then it is completed, the failure overturned and cleared
    assert after.status == "completed"
    assert after.overturned is True
    assert (after.completed_at, after.failed_at) == (at(21), None)
    assert (after.pages_crawled, after.pages_total) == (10, 10)
    assert after.error_code is None
    assert after.error_detail is None
    assert after.failed_phase is None
    assert after.failed_by is None
    assert after.reconciled_by is None
    row = next_status("failed", "AuditCompleted", before)
    assert row is not None and row.condition_names == ("failed_by_reconciler",)


@pytest.mark.parametrize("by", ["workflow", "operator"])
def test_completion_does_not_overturn_a_failure_by_the_workflow_or_an_operator(by: str) -> None:
    # given an audit failed by the workflow or an operator
    before = evolve(running(), failed(when=at(20), by=by, code="oom"))

    # when a completion arrives
    after = evolve(before, completed(when=at(21), crawled=10))

    # then it stays failed, untouched
    assert after == before
    assert after.overturned is False
    assert next_status("failed", "AuditCompleted", before) is None


def test_an_overturned_audit_is_completed_for_good() -> None:
    before = state_of(*TERMINAL_HISTORIES["completed_after_overturn"])

    after = evolve(before, failed(when=at(30), by="reconciler", code="instance_lost"))
    after = evolve(after, completed(when=at(31)))

    assert after == before
    assert after.status == "completed" and after.overturned


# --- terminal + anything else -------------------------------------------------------------------

LATE_EVENTS = {
    "AuditStarted": lambda: started(when=at(40), project_id="p-2"),
    "WorkflowInstanceAttached": lambda: attached("wf-late", when=at(40)),
    "AuditProgressed": lambda: progressed(when=at(40), phase="late", crawled=1, total=2),
    "AuditCompleted": lambda: completed(when=at(40), crawled=1),
    "AuditFailed": lambda: failed(when=at(40), by="reconciler", code="instance_lost"),
    "AuditFailureSimulated": lambda: simulated(when=at(40)),
    "WorkflowStatusObserved": lambda: observed("errored", when=at(40), error="boom"),
    "WorkflowProbeFailed": lambda: probe_failed(when=at(40)),
}


TERMINAL_CASES = [
    (history, trigger)
    for history in TERMINAL_HISTORIES
    for trigger in LATE_EVENTS
    # the one way out of a terminal state, tested above
    if (history, trigger) != ("failed_by_reconciler", "AuditCompleted")
]


@pytest.mark.parametrize(("history", "trigger"), TERMINAL_CASES, ids=str)
def test_a_terminal_audit_records_but_never_applies_other_events(
    history: str, trigger: str
) -> None:
    # given a terminal audit
    before = state_of(*TERMINAL_HISTORIES[history])

    # when any other event arrives
    after = evolve(before, LATE_EVENTS[trigger]())

    # then its lifecycle is unchanged
    assert after.status == before.status
    assert lifecycle(after) == lifecycle(before)


def test_observations_of_a_terminal_audit_only_refresh_what_was_last_seen() -> None:
    # given a completed audit
    before = state_of(*TERMINAL_HISTORIES["completed"])

    # when a probe still sees the instance errored
    after = evolve(before, observed("errored", when=at(40), error="boom"))

    # then only the observation bookkeeping moves (information, not lifecycle)
    assert after.last_observed_status == "errored"
    assert after.last_observed_at == at(40)
    assert after._replace(last_observed_status=None, last_observed_at=None) == before


# --- the table itself ----------------------------------------------------------------------------


def expected_dest(status: str, trigger: str, failed_by: str | None) -> str | None:
    """DESIGN §4's table, written independently of machine.TRANSITIONS."""
    if status == INITIAL:
        return "running" if trigger == "AuditStarted" else None
    if status == "running":
        return {
            "AuditStarted": None,
            "AuditCompleted": "completed",
            "AuditFailed": "failed",
            "AuditRestored": None,
        }.get(trigger, "running")
    if status == "failed" and trigger == "AuditCompleted" and failed_by == "reconciler":
        return "completed"
    if (
        status == "failed"
        and trigger == "AuditRestored"
        and failed_by in ("reconciler", "operator")
    ):
        return "running"  # §9: an operator undoes a failure auditrec made
    return None


@pytest.mark.parametrize("status", STATES)
@pytest.mark.parametrize("trigger", TRIGGERS)
@pytest.mark.parametrize("failed_by", [None, "workflow", "reconciler", "operator"])
def test_next_status_follows_the_design_table(
    status: str, trigger: str, failed_by: str | None
) -> None:
    audit = AuditState(audit_id="a-1", status=status, failed_by=failed_by)

    row = next_status(status, trigger, audit)

    dest = row.dest if row is not None else None
    assert dest == expected_dest(status, trigger, failed_by)
    if row is not None:
        assert (row.source, row.trigger) == (status, trigger)


def test_a_conditioned_row_is_not_taken_without_an_audit_to_check() -> None:
    assert next_status("failed", "AuditCompleted") is None


@pytest.mark.parametrize("trigger", TRIGGERS)
def test_a_status_outside_the_table_has_no_row(trigger: str) -> None:
    assert next_status("archived", trigger, AuditState(audit_id="a-1", status="archived")) is None


def test_the_table_covers_every_event_type_and_only_known_states() -> None:
    from statemachine.events import LIFECYCLE_TYPES

    assert set(TRIGGERS) == set(LIFECYCLE_TYPES)
    assert {row["trigger"] for row in TRANSITIONS} == set(TRIGGERS)
    for row in TRANSITIONS:
        assert row["source"] in STATES and row["dest"] in STATES
        assert row["dest"] != INITIAL
        assert set(row.get("conditions", [])) <= set(machine.CONDITIONS)
    assert {"completed", "failed"} == TERMINAL


def test_a_terminal_state_is_left_only_under_a_condition_and_back_to_running_only_by_restore() -> (
    None
):
    leaving = [row for row in TRANSITIONS if row["source"] in TERMINAL]

    assert leaving == [row for row in TRANSITIONS if row.get("conditions")]
    back = [row for row in leaving if row["dest"] not in TERMINAL]
    assert [(r["trigger"], r["source"], r["dest"]) for r in back] == [
        ("AuditRestored", "failed", "running")
    ]
    assert back[0].get("conditions") == ["failed_by_reconciler_or_operator"]


def test_the_lookup_index_holds_each_row_of_the_table_once() -> None:
    indexed = [
        (row.trigger, row.source, row.dest, row.condition_names, row.note)
        for rows in machine._INDEX.values()
        for row in rows
    ]
    written = [
        (r["trigger"], r["source"], r["dest"], tuple(r.get("conditions", [])), r["note"])
        for r in TRANSITIONS
    ]
    assert sorted(indexed) == sorted(written)


def _row(trigger: str, source: str, dest: str, *conditions: str) -> TableRow:
    row: TableRow = {"trigger": trigger, "source": source, "dest": dest, "note": "x"}
    if conditions:
        row["conditions"] = list(conditions)
    return row


GOOD = TRANSITIONS


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ((*GOOD, _row("AuditProgressed", "paused", "running")), "unknown state"),
        ((*GOOD, _row("AuditProgressed", "running", "limbo")), "unknown state"),
        ((*GOOD, _row("AuditExploded", "running", "failed")), "unknown trigger"),
        ((*GOOD, _row("AuditFailed", "failed", "failed", "when_sunny")), "unknown condition"),
        (
            (*GOOD, _row("AuditFailed", "running", "completed")),
            "ambiguous transitions for AuditFailed from running",
        ),
        (
            (*GOOD, _row("AuditStarted", "completed", "running")),
            "a terminal state may only be left under a condition",
        ),
        (
            tuple(r for r in GOOD if r["trigger"] != "WorkflowProbeFailed"),
            "triggers without a transition",
        ),
    ],
    ids=[
        "unknown-source",
        "unknown-dest",
        "unknown-trigger",
        "unknown-condition",
        "two-unconditioned-rows",
        "unconditioned-exit-from-terminal",
        "trigger-without-row",
    ],
)
def test_a_bad_table_is_rejected_by_validation(
    monkeypatch: pytest.MonkeyPatch, rows: tuple[TableRow, ...], message: str
) -> None:
    # given a table with a mistake
    monkeypatch.setattr(machine, "TRANSITIONS", rows)

    # when it is validated (as at import) then it is refused, naming the mistake
    with pytest.raises(ValueError, match=message):
        machine._validate()


def test_a_conditioned_row_listed_after_the_unconditioned_one_is_ambiguous(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rows = (*GOOD, _row("AuditFailed", "running", "failed", "failed_by_reconciler"))
    monkeypatch.setattr(machine, "TRANSITIONS", rows)

    with pytest.raises(ValueError, match="ambiguous"):
        machine._validate()


# --- mermaid -------------------------------------------------------------------------------------


def test_mermaid_is_drawn_from_the_table_by_the_library() -> None:
    text = mermaid()
    lines = [line.strip() for line in text.splitlines()]

    assert text.endswith("\n")
    assert "stateDiagram-v2" in lines
    arrows = [line for line in lines if "-->" in line]
    for row in TRANSITIONS:
        label = row["trigger"] + "".join(f" [{c}]" for c in row.get("conditions", []))
        edge = next(a for a in arrows if a.startswith(f"{row['source']} --> {row['dest']}: "))
        assert label in edge.split(": ", 1)[1].split(" | ")
    assert "failed --> completed: AuditCompleted [failed_by_reconciler]" in arrows
    assert "[*] --> none" in arrows
    assert mermaid() == text


def test_mermaid_marks_the_current_state_of_an_audit() -> None:
    plain = mermaid()
    marked = mermaid("failed")

    assert "Class failed s_active" in marked
    assert "Class failed s_active" not in plain
    assert "s_active" not in plain.replace("classDef s_active", "")
