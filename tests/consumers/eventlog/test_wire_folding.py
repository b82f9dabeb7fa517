"""Folding views (``codec.read``) against folding models (``codec.decode``): the state machine,
the projection's rows, the reconciler's and telemetry's states (and what telemetry reports)
come out the same, event after event, over generated histories of one audit; the rules judge a
view of an observation as they judge its model, to the same decision, which reads back from
its JSON as built; the reconciler knows its own decisions read as views; and it reads a hold it keeps and copies
as the model, whatever the record's header says."""

from __future__ import annotations

import itertools
import json
import uuid
from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from consumers.components.reconciler.log import decode_to_judge, fold_into, own_decision
from consumers.components.telemetry import Telemetry
from consumers.components.telemetry.posthog import capture_arguments
from consumers.eventlog import codec
from consumers.eventlog.port import Record
from projections.row import AuditRow, RowFold, project
from statemachine.errors import DecodeError
from statemachine.events import LIFECYCLE_TYPES, AuditEvent, AuditFailed, AuditFailureHeld
from statemachine.policy import Policy
from statemachine.rules import PRODUCER, decide
from statemachine.state import AuditState, evolve, initial
from tests.consumers.eventlog.wire_events import valid_events
from tests.fuzz.hostile import FUZZ_EXAMPLES

PROFILE = settings(
    max_examples=max(FUZZ_EXAMPLES // 5, 30),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
_INSTANCES = st.sampled_from(["wf-1", "wf-2"])


def _of_the_audit(envelope: dict[str, Any], instance: str | None) -> dict[str, Any]:
    envelope["audit_id"] = "a-1"
    data = envelope.get("data")
    if isinstance(data, dict) and "workflow_instance_id" in data and instance is not None:
        data["workflow_instance_id"] = instance
    return envelope


def _decodes(envelope: dict[str, Any]) -> bool:
    try:
        codec.decode(json.dumps(envelope).encode())
    except DecodeError:
        return False
    return True


# Every type, observations and progress more often than the rest.
_KINDS = (*sorted(LIFECYCLE_TYPES), "WorkflowStatusObserved", "AuditProgressed")
_EVENTS = st.builds(_of_the_audit, valid_events(_KINDS), _INSTANCES).filter(_decodes)
_STARTS = st.builds(
    lambda envelope, instance: {
        **envelope,
        "data": {**envelope["data"], "workflow_instance_id": instance},
    },
    st.builds(_of_the_audit, valid_events(("AuditStarted",)), st.none()).filter(_decodes),
    _INSTANCES,
)


@st.composite
def histories(draw: st.DrawFn) -> list[bytes]:
    """Valid records of one audit, most about one of two instances (so observations match),
    mostly opened by the audit's start."""
    envelopes = draw(st.lists(_EVENTS, min_size=3, max_size=10))
    if draw(st.integers(0, 3)):
        envelopes.insert(0, draw(_STARTS))
    return [json.dumps(e, ensure_ascii=False).encode() for e in envelopes]


def _both(values: list[bytes]) -> list[tuple[AuditEvent, AuditEvent]]:
    """Each record that decodes, as a view (when it can be one) and as the model."""
    out = []
    for value in values:
        try:
            model = codec.decode(value)
        except DecodeError:
            continue
        out.append((codec.read(value), model))
    return out


_AT = datetime(2026, 11, 30, 8, tzinfo=UTC)
_RUNNING = AuditState(
    audit_id="a-1",
    project_id="p",
    workflow_instance_id="wf-1",
    status="running",
    current_phase="crawl",
    pages_crawled=3,
    pages_total=10,
    started_at=_AT,
    last_observed_status="running",
    last_observed_at=_AT,
)
# States an event may meet: none yet, running (held, or its instance seen complete), ended.
_STATES = (
    initial("a-1"),
    _RUNNING,
    _RUNNING._replace(held_decision_id=str(uuid.UUID(int=7)), held_at=_AT),
    _RUNNING._replace(workflow_instance_id="wf-2", instance_ended_at=_AT),
    _RUNNING._replace(status="failed", failed_by="reconciler", error_code="instance_lost"),
    _RUNNING._replace(status="failed", failed_by="producer", error_code="crawl_failed"),
    _RUNNING._replace(status="completed", completed_at=_AT),
)


@PROFILE
@given(histories())
def test_the_state_machine_folds_views_as_it_folds_models(values: list[bytes]) -> None:
    pairs = _both(values)
    by_view = by_model = initial("a-1")
    for view, model in pairs:
        by_view, by_model = evolve(by_view, view), evolve(by_model, model)
        assert by_view == by_model, model.type
        for state in _STATES:  # and the event met in every kind of state
            assert evolve(state, view) == evolve(state, model), (model.type, state.status)


@PROFILE
@given(histories(), st.booleans())
def test_the_projection_folds_views_as_it_folds_models(values: list[bytes], known: bool) -> None:
    pairs = _both(values)
    rows: dict[str, AuditRow] = {}
    if known:  # a row the store already holds
        rows["a-1"] = AuditRow(state=initial("a-1"), version=0, last_event_id=None)
    by_view, by_model = RowFold(rows), RowFold(rows)
    row_view = row_model = rows.get("a-1")
    for view, model in pairs:
        by_view.add(view)
        by_model.add(model)
        row_view, row_model = project(row_view, view), project(row_model, model)
        assert row_view == row_model, model.type
    assert by_view.changed() == by_model.changed()


@PROFILE
@given(histories())
def test_the_reconciler_folds_what_it_reads_as_it_folds_models(values: list[bytes]) -> None:
    by_view: dict[str, AuditState] = {}
    by_model: dict[str, AuditState] = {}
    holds_view: dict[str, Any] = {}
    holds_model: dict[str, Any] = {}
    for offset, value in enumerate(values):
        kind = json.loads(value)["type"]
        record = Record("t", 0, offset, "a-1", value, (("event-type", kind.encode()),), 0)
        try:
            model = codec.decode(value)
        except DecodeError:
            continue
        event = decode_to_judge(record)
        assert own_decision(event) == own_decision(model), kind
        fold_into(by_view, holds_view, event, by_view.get("a-1"))
        fold_into(by_model, holds_model, model, by_model.get("a-1"))
        assert by_view == by_model, kind
        assert holds_view == holds_model, kind


# Enforcing, in shadow mode, and with a brake that holds a sweep of one (engaged or not).
_POLICIES = (Policy(), Policy(shadow=True), Policy(brake_min_audits=1))
_OBSERVATIONS = st.builds(
    _of_the_audit, valid_events(("WorkflowStatusObserved", "WorkflowProbeFailed")), _INSTANCES
).filter(_decodes)


@PROFILE
@given(st.lists(_OBSERVATIONS, min_size=1, max_size=4))
def test_the_rules_judge_views_as_they_judge_models(envelopes: list[dict[str, Any]]) -> None:
    for envelope in envelopes:
        value = json.dumps(envelope, ensure_ascii=False).encode()
        view, model = codec.read(value), codec.decode(value)
        for state, policy, engaged in itertools.product(_STATES, _POLICIES, (False, True)):
            by_view = decide(state, view, policy, brake_engaged=engaged)
            by_model = decide(state, model, policy, brake_engaged=engaged)
            (seen, decided), (expected, wanted) = by_view, by_model
            assert (seen is None) == (expected is None)
            if seen is not None and expected is not None:
                assert (seen.rule, seen.reason, seen.failure) == (
                    expected.rule,
                    expected.reason,
                    expected.failure,
                )
            assert decided == wanted, (state.status, policy)
            if decided is not None:  # built without validation: as validated, and read back
                assert _validated(decided) == decided
                read_back = type(decided).model_validate_json(decided.model_dump_json())
                assert read_back == decided
                assert read_back.model_dump() == decided.model_dump()


def _validated(model: Any) -> Any:
    """``model`` made again by validating the values it was given (nested models too)."""
    given = {name: getattr(model, name) for name in model.model_fields_set}
    data = given.get("data")
    if data is not None:
        given["data"] = _validated(data)
    return type(model)(**given)


@PROFILE
@given(histories())
def test_telemetry_folds_and_reports_views_as_it_does_models(values: list[bytes]) -> None:
    by_view: dict[str, AuditState] = {}
    by_model: dict[str, AuditState] = {}
    for view, model in _both(values):
        assert Telemetry.fold(by_view, {}, view) == Telemetry.fold(by_model, {}, model), model.type
        for state in _STATES:  # the event met in every kind of state
            assert Telemetry.fold({"a-1": state}, {}, view) == Telemetry.fold(
                {"a-1": state}, {}, model
            )
            if model.type == "AuditFailed":  # what PostHog would be sent, were it reported
                assert capture_arguments(state, view) == capture_arguments(state, model)


def test_telemetry_follows_again_an_audit_an_operator_restores_from_its_view() -> None:
    # given an operator's failure undone, on an audit telemetry keeps no state of
    restored = {
        "event_id": "0b9b5a3e-3c1f-4a52-9b9e-1f6d2a7c8e02",
        "type": "AuditRestored",
        "audit_id": "a-1",
        "producer": "cli",
        "occurred_at": "2026-11-30T09:00:00+02:00",
        "data": {
            "reason": "wrongly failed",
            "actor": "cli:ops",
            "failure_id": "0b9b5a3e-3c1f-4a52-9b9e-1f6d2a7c8e03",
            "failed_by": "operator",
            "error_code": "instance_lost",
            "resume": {"project_id": "p", "workflow_instance_id": "wf-1"},
        },
    }
    value = json.dumps(restored).encode()
    view, model = codec.read(value), codec.decode(value)
    assert type(view) is not type(model)  # a view, not the model
    # then the view is followed again as the model is: running, with the facts it carries
    (_, by_view), (_, by_model) = Telemetry.fold({}, {}, view), Telemetry.fold({}, {}, model)
    assert by_view == by_model
    assert by_view.status == "running" and by_view.workflow_instance_id == "wf-1"


def _record(value: bytes, header: bytes | None) -> Record:
    headers = (("event-type", header),) if header is not None else ()
    return Record("t", 0, 0, "a-1", value, headers, 0)


def test_the_reconciler_reads_a_hold_it_keeps_and_copies_as_its_model_whatever_the_header() -> None:
    held = {
        "event_id": "0b9b5a3e-3c1f-4a52-9b9e-1f6d2a7c8e01",
        "type": "AuditFailureHeld",
        "audit_id": "a-1",
        "producer": PRODUCER,
        "occurred_at": "2026-11-30T08:00:00Z",
        "data": {
            "decision": {
                "error_code": "instance_lost",
                "error_detail": "d",
                "failed_by": "reconciler",
            },
            "reason": "the mass-failure brake is engaged",
        },
    }
    value = json.dumps(held).encode()
    # an honest header, a header that lies (an event read as a view), and none at all
    for header in (b"AuditFailureHeld", b"AuditProgressed", None):
        event = decode_to_judge(_record(value, header))
        assert type(event) is AuditFailureHeld, header
        assert own_decision(event)


def test_the_reconciler_knows_its_own_decision_read_as_a_view() -> None:
    failed = {
        "event_id": "0b9b5a3e-3c1f-4a52-9b9e-1f6d2a7c8e01",
        "type": "AuditFailed",
        "audit_id": "a-1",
        "producer": PRODUCER,
        "occurred_at": "2026-11-30T08:00:00Z",
        "data": {"error_code": "oom", "error_detail": "d", "failed_by": "reconciler"},
    }
    value = json.dumps(failed).encode()
    event = decode_to_judge(_record(value, b"AuditFailed"))
    assert type(event) is not AuditFailed  # a view, cheaper
    assert own_decision(event)
    by_operator = json.dumps({**failed, "data": {**failed["data"], "failed_by": "operator"}})
    assert not own_decision(decode_to_judge(_record(by_operator.encode(), b"AuditFailed")))


def test_the_reconciler_reads_an_event_it_only_folds_as_a_view() -> None:
    progressed = {
        "event_id": "0b9b5a3e-3c1f-4a52-9b9e-1f6d2a7c8e01",
        "type": "AuditProgressed",
        "audit_id": "a-1",
        "producer": "crawler",
        "occurred_at": "2026-11-30T08:00:00Z",
        "data": {"pages_crawled": 3},
    }
    value = json.dumps(progressed).encode()
    for header in (b"AuditProgressed", None):
        event = decode_to_judge(_record(value, header))
        assert type(event) is not LIFECYCLE_TYPES["AuditProgressed"]  # a view, cheaper
        assert event.type == "AuditProgressed" and event.data.pages_crawled == 3
    # a header that lies changes nothing: the record is read for what it is
    event = decode_to_judge(_record(value, b"AuditFailureHeld"))
    assert type(event) is not LIFECYCLE_TYPES["AuditProgressed"]
    assert event.type == "AuditProgressed"
