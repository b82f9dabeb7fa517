"""Properties of the core over arbitrary histories of one audit (hypothesis)."""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statemachine.events import (
    EVENT_ADAPTER,
    AuditEvent,
    AuditFailed,
    AuditFailureSimulated,
    WorkflowProbeFailed,
    WorkflowStatusObserved,
    derived_id,
)
from statemachine.machine import INITIAL, STATES, TERMINAL, next_status
from statemachine.policy import Policy
from statemachine.rules import Verdict, decide
from statemachine.state import AuditState, evolve, fold
from statemachine.upcasting import CURRENT_VERSION, upcast
from statemachine.vocabulary import ERROR_CODES
from tests.statemachine.sm_builders import (
    AUDIT,
    T0,
    attached,
    completed,
    failed,
    observed,
    probe_failed,
    progressed,
    simulated,
    started,
)

# Modest counts: the whole file stays well under 20 s.
PROPERTY = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

INSTANCES = st.sampled_from([None, "wf-1", "wf-2"])
PHASES = st.sampled_from(["discovery", "crawl", "analysis", "report"])
COUNTS = st.none() | st.integers(0, 500)
STATUSES = st.sampled_from(
    # every observable status; "complete" and "running" weighted up, as a real history has them
    ["complete"] * 4
    + ["running"] * 2
    + ["queued", "paused", "waiting", "waitingForPause", "rollingBack", "unknown"]
    + ["errored", "terminated", "not_found", "not_attached"]
)
ERRORS = st.sampled_from(
    [
        None,
        "",
        "Worker exceeded CPU time limit.",
        {"name": "WorkflowTimeoutError", "message": "Execution timed out after 1000ms"},
        {"name": "Error", "message": "boom"},
        {"message": "D1_ERROR: no such table"},
        "E: " + "x" * 1500,
    ]
)
TRIGGERS = st.sampled_from(["watchdog", "on_demand", "manual"])
# Gaps between events, biased to hit the 10-minute graces exactly.
GAPS = st.one_of(st.integers(0, 1500), st.sampled_from([599, 600, 601]))


# Mostly the instance the audit started on, so the rules (not only rule 1) get exercised.
LIKELY_INSTANCES = st.sampled_from(["wf-1", "wf-1", "wf-1", "wf-2", None])
OBSERVATION = st.tuples(
    st.just("observed"),
    STATUSES,
    LIKELY_INSTANCES,
    ERRORS,
    st.sampled_from([None, None, 0, 300, 599, 600, 601, 1800]),  # seconds since the end
    TRIGGERS,
)
# An event is drawn as a spec (kind and arguments), then built at its time: the strategies are
# built once, which keeps the examples cheap.
SPEC_BY_KIND: dict[str, st.SearchStrategy[tuple[Any, ...]]] = {
    "observed": OBSERVATION,
    "progressed": st.tuples(st.just("progressed"), st.none() | PHASES, COUNTS, COUNTS),
    "probe_failed": st.tuples(
        st.just("probe_failed"), st.sampled_from(["timeout", "network"]), LIKELY_INSTANCES
    ),
    "attached": st.tuples(st.just("attached"), st.sampled_from(["wf-1", "wf-2"])),
    "started": st.tuples(st.just("started"), INSTANCES),
    "completed": st.tuples(st.just("completed"), COUNTS),
    "failed": st.tuples(
        st.just("failed"),
        st.sampled_from(["workflow", "reconciler", "operator"]),
        st.sampled_from(ERROR_CODES),
    ),
    "simulated": st.tuples(st.just("simulated")),
}
# Observations are the bulk of a real history; endings are rarer.
KINDS = st.sampled_from(
    ["observed"] * 8
    + ["progressed"] * 2
    + ["probe_failed", "attached", "started", "completed", "failed", "simulated"]
)
SPECS = KINDS.flatmap(SPEC_BY_KIND.__getitem__)


def build(spec: tuple[Any, ...], when: datetime) -> AuditEvent:
    kind, *args = spec
    if kind == "started":
        return started(when=when, instance=args[0])
    if kind == "attached":
        return attached(args[0], when=when)
    if kind == "progressed":
        return progressed(when=when, phase=args[0], crawled=args[1], total=args[2])
    if kind == "completed":
        return completed(when=when, crawled=args[0])
    if kind == "failed":
        return failed(when=when, by=args[0], code=args[1])
    if kind == "simulated":
        return simulated(when=when)
    if kind == "observed":
        status, instance, error, ago, trigger = args
        ended = None if ago is None else when - timedelta(seconds=ago)
        return observed(
            status, when=when, instance=instance, error=error, ended=ended, trigger=trigger
        )
    assert kind == "probe_failed"
    return probe_failed(when=when, reason=args[0], instance=args[1])


@st.composite
def histories(draw: st.DrawFn, max_size: int = 14) -> list[AuditEvent]:
    """Events of one audit, usually opened by an AuditStarted, in forward time."""
    when = T0 + timedelta(seconds=draw(st.integers(0, 86400)))
    specs: list[tuple[tuple[Any, ...], datetime]] = []
    if draw(st.integers(0, 9)) > 0:  # sometimes the history starts mid-way
        specs.append((("started", draw(LIKELY_INSTANCES)), when))
    for spec in draw(st.lists(SPECS, max_size=max_size)):
        when += timedelta(seconds=draw(GAPS))
        specs.append((spec, when))
    # Ids by position, so a replayed example is the same history.
    return [
        build(spec, at).model_copy(update={"event_id": uuid.UUID(int=n + 1)})
        for n, (spec, at) in enumerate(specs)
    ]


events_anytime = st.builds(
    build, SPECS, st.integers(0, 3600).map(lambda s: T0 + timedelta(seconds=s))
)


states = st.builds(
    AuditState,
    audit_id=st.just(AUDIT),
    status=st.sampled_from(STATES),
    failed_by=st.sampled_from([None, "workflow", "reconciler", "operator"]),
    workflow_instance_id=INSTANCES,
    current_phase=st.none() | PHASES,
    pages_crawled=COUNTS,
    pages_total=COUNTS,
    started_at=st.none() | st.just(T0),
    instance_ended_at=st.none() | st.just(T0 + timedelta(minutes=3)),
    last_observed_at=st.none() | st.just(T0 + timedelta(minutes=4)),
    overturned=st.booleans(),
)


def statuses(events: Sequence[AuditEvent]) -> list[str]:
    out = [INITIAL]
    state = AuditState(audit_id=AUDIT)
    for event in events:
        state = evolve(state, event)
        out.append(state.status)
    return out


def reconcile(
    events: Sequence[AuditEvent], policy: Policy
) -> tuple[AuditState | None, list[tuple[Verdict | None, AuditEvent | None]], list[AuditState]]:
    """What the reconciler does: judge each event on the state before it, append decisions."""
    state: AuditState | None = None
    outcomes: list[tuple[Verdict | None, AuditEvent | None]] = []
    trail: list[AuditState] = []
    for event in events:
        verdict, decision = decide(state, event, policy)
        state = evolve(state or AuditState(audit_id=event.audit_id), event)
        if decision is not None:
            state = evolve(state, decision)
        outcomes.append((verdict, decision))
        trail.append(state)
    return state, outcomes, trail


_TIME_FIELDS = {"occurred_at", "started_at", "completed_at", "observed_at", "workflow_ended_at"}


def shifted(event: AuditEvent, by: timedelta) -> AuditEvent:
    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: (v + by if k in _TIME_FIELDS and isinstance(v, datetime) else walk(v))
                for k, v in value.items()
            }
        return value

    return EVENT_ADAPTER.validate_python(walk(event.model_dump()))


def without_times(decision: AuditEvent | None) -> Any:
    if decision is None:
        return None
    raw = decision.model_dump()
    raw.pop("occurred_at")
    for key in ("observed_at", "workflow_ended_at"):
        raw["data"]["policy"].pop(key, None)
    return raw


def timeless(verdict: Verdict | None) -> Any:
    if verdict is None:
        return None
    failure = None
    if verdict.failure is not None:
        failure = verdict.failure.model_dump()
        for key in ("observed_at", "workflow_ended_at"):
            failure["policy"].pop(key, None)
    return (verdict.rule, verdict.reason, failure)


# --- lifecycle ------------------------------------------------------------------------------------

RANK = {INITIAL: 0, "running": 1, "failed": 2, "completed": 3}
ALLOWED_MOVES = {
    (INITIAL, "running"),
    ("running", "completed"),
    ("running", "failed"),
    ("failed", "completed"),
}


@PROPERTY
@given(histories())
def test_no_sequence_of_events_moves_a_terminal_audit_back_to_running(
    events: list[AuditEvent],
) -> None:
    seen = statuses(events)

    for before, after in itertools.pairwise(seen):
        if before in TERMINAL:
            assert after in TERMINAL
        if before != after:
            assert (before, after) in ALLOWED_MOVES
        # the lifecycle only moves forward: at most none → running → failed → completed
        assert RANK[after] >= RANK[before]


@PROPERTY
@given(histories())
def test_a_failure_is_overturned_only_when_the_reconciler_made_it(
    events: list[AuditEvent],
) -> None:
    state = AuditState(audit_id=AUDIT)
    for event in events:
        after = evolve(state, event)
        if state.status == "failed" and after.status == "completed":
            assert state.failed_by == "reconciler"
            assert after.overturned
        state = after


@PROPERTY
@given(histories(), st.sampled_from([Policy(), Policy(shadow=True)]))
def test_an_overturned_audit_is_completed(events: list[AuditEvent], policy: Policy) -> None:
    _, _, trail = reconcile(events, policy)

    for state in trail:
        if state.overturned:
            assert state.status == "completed"
            assert state.error_code is None and state.failed_by is None


# --- evolve and fold ------------------------------------------------------------------------------


@PROPERTY
@given(states, events_anytime)
def test_evolve_never_raises_and_only_takes_table_transitions(
    state: AuditState, event: AuditEvent
) -> None:
    after = evolve(state, event)

    assert isinstance(after, AuditState)
    assert after.status in STATES
    assert after.audit_id == state.audit_id
    row = next_status(state.status, event.type, state)
    assert after.status == (row.dest if row is not None else state.status)


@PROPERTY
@given(histories())
def test_fold_is_deterministic(events: list[AuditEvent]) -> None:
    once = fold(events)
    twice = fold(events)
    copies = fold([EVENT_ADAPTER.validate_json(EVENT_ADAPTER.dump_json(e)) for e in events])

    assert once == twice == copies
    assert fold(iter(events)) == once


@PROPERTY
@given(histories(), st.data())
def test_folding_in_two_parts_equals_folding_at_once(events: list[AuditEvent], data) -> None:
    cut = data.draw(st.integers(1, max(1, len(events))))
    head, tail = events[:cut], events[cut:]

    assert fold(tail, fold(head)) == fold(events)


# --- the rules ------------------------------------------------------------------------------------


@PROPERTY
@given(histories(), st.sampled_from([Policy(), Policy(shadow=True)]))
def test_decisions_depend_only_on_the_history_and_the_policy(
    events: list[AuditEvent], policy: Policy
) -> None:
    first = reconcile(events, policy)
    again = reconcile(events, policy)
    copies = reconcile(
        [EVENT_ADAPTER.validate_json(EVENT_ADAPTER.dump_json(e)) for e in events], policy
    )

    assert first == again == copies


@PROPERTY
@given(histories(), st.integers(1, 3650), st.sampled_from([1, -1]))
def test_decisions_do_not_depend_on_when_the_history_happened(
    events: list[AuditEvent], days: int, sign: int
) -> None:
    # shifting every time of the history by years changes no verdict: only the
    # events' own times count, never the wall clock
    offset = timedelta(days=days * sign)
    _, base, _ = reconcile(events, Policy())
    _, moved, _ = reconcile([shifted(e, offset) for e in events], Policy())

    assert [timeless(v) for v, _ in base] == [timeless(v) for v, _ in moved]
    assert [without_times(d) for _, d in base] == [without_times(d) for _, d in moved]
    for verdict, _ in base:
        if verdict is not None:
            assert not re.search(r"\d{4}-\d{2}-\d{2}", verdict.reason)


@PROPERTY
@given(histories())
def test_every_decision_is_a_reconciler_failure_caused_by_a_running_audits_observation(
    events: list[AuditEvent],
) -> None:
    state: AuditState | None = None
    for event in events:
        verdict, decision = decide(state, event, Policy())
        assert (verdict is not None) == isinstance(
            event, WorkflowStatusObserved | WorkflowProbeFailed
        )
        if decision is not None:
            assert isinstance(event, WorkflowStatusObserved)
            assert state is not None and state.status == "running"
            assert event.data.workflow_instance_id == state.workflow_instance_id
            assert isinstance(decision, AuditFailed)
            assert decision.event_id == derived_id(event.event_id, "reconciler-decision")
            assert decision.causation_id == event.event_id
            assert decision.data.failed_by.value == "reconciler"
            assert decision.data.failed_phase == state.current_phase
            assert decision.data.workflow_status == event.data.status
            assert len(decision.data.error_detail) <= 500
            assert decision.data.policy is not None
            assert decision.data.policy["mode"] == "enforce"
            assert evolve(state, decision).status == "failed"
        state = evolve(state or AuditState(audit_id=event.audit_id), event)
        if decision is not None:
            state = evolve(state, decision)


@PROPERTY
@given(histories())
def test_shadow_mode_never_changes_what_the_history_alone_gives(events: list[AuditEvent]) -> None:
    final, outcomes, _ = reconcile(events, Policy(shadow=True))

    assert final == fold(events)
    for _, decision in outcomes:
        assert decision is None or isinstance(decision, AuditFailureSimulated)


@PROPERTY
@given(histories())
def test_a_probe_failure_never_changes_the_lifecycle(events: list[AuditEvent]) -> None:
    state = AuditState(audit_id=AUDIT)
    for event in events:
        after = evolve(state, event)
        if isinstance(event, WorkflowProbeFailed):
            assert after.status == state.status
            assert after.error_code == state.error_code
            assert after.current_phase == state.current_phase
            assert decide(state, event, Policy())[1] is None
        state = after


# --- versions -------------------------------------------------------------------------------------


@PROPERTY
@given(histories())
def test_every_event_and_decision_is_at_the_current_schema_version(
    events: list[AuditEvent],
) -> None:
    _, outcomes, _ = reconcile(events, Policy())
    decisions = [d for _, d in outcomes if d is not None]

    for event in [*events, *decisions]:
        raw = event.model_dump(mode="json")
        assert event.schema_version == CURRENT_VERSION[event.type]
        assert upcast(raw) == raw
        assert EVENT_ADAPTER.validate_python(upcast(raw)) == event


def test_shift_helper_moves_every_time() -> None:
    event = observed("complete", when=T0, ended=T0 - timedelta(minutes=1))
    moved = shifted(event, timedelta(days=1))

    assert isinstance(moved, WorkflowStatusObserved)
    assert moved.occurred_at == datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    assert moved.data.observed_at == moved.occurred_at
    assert moved.data.workflow_ended_at == moved.occurred_at - timedelta(minutes=1)
