"""The event contract (DESIGN §3): envelope validation, the discriminator, JSON, upcasting."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from statemachine import upcasting
from statemachine.errors import InvalidInput
from statemachine.events import (
    EVENT_ADAPTER,
    LIFECYCLE_TYPES,
    PROBE_ADAPTER,
    AuditCompleted,
    AuditFailed,
    AuditStarted,
    ProbeRequested,
    WorkflowError,
    WorkflowStatusObserved,
    derived_id,
)
from statemachine.upcasting import upcast

EVENT_ID = "0b9b5a3e-3c1f-4a52-9b9e-1f6d2a7c8e01"
WHEN = "2026-11-30T08:00:00Z"

DATA: dict[str, dict[str, Any]] = {
    "AuditStarted": {
        "project_id": "p-1",
        "organization_id": "o-1",
        "started_by_user_id": "u-1",
        "start_url": "https://example.com/",
        "workflow_instance_id": "wf-1",
        "started_at": WHEN,
        "current_phase": "discovery",
        "pages_total": 10,
    },
    "WorkflowInstanceAttached": {"workflow_instance_id": "*/30 * * * *-1786001400000"},
    "AuditProgressed": {"current_phase": "crawl", "pages_crawled": 3, "pages_total": 10},
    "AuditCompleted": {"pages_crawled": 10, "pages_total": 10, "completed_at": WHEN},
    "AuditFailed": {
        "error_code": "oom",
        "error_detail": "Worker exceeded memory limit",
        "failed_phase": "crawl",
        "failed_by": "reconciler",
        "reconciled_by": "watchdog",
        "workflow_status": "errored",
        "policy": {"instance_lost_grace_s": 600.0},
    },
    "AuditFailureSimulated": {
        "error_code": "instance_lost",
        "error_detail": "Workflow instance was not found",
        "failed_by": "reconciler",
    },
    "AuditFailureHeld": {
        "decision": {
            "error_code": "instance_lost",
            "error_detail": "Workflow instance was not found",
            "failed_by": "reconciler",
            "rule": "instance_lost",
        },
        "sweep_id": "sweep-20261130T080000-abc123",
        "reason": "the mass-failure brake is engaged",
    },
    "AuditFailureReleased": {
        "held_id": "5b1f8c3e-0d55-5a7e-9a43-2f0e7c0d1a7e",
        "actor": "cli:ops",
        "reason": "the provider's incident is over",
    },
    "AuditFailureDiscarded": {
        "held_id": "5b1f8c3e-0d55-5a7e-9a43-2f0e7c0d1a7e",
        "actor": "ops-token",
    },
    "AuditRestored": {
        "reason": "the workflow was alive after all",
        "actor": "ops-token",
        "failure_id": "5b1f8c3e-0d55-5a7e-9a43-2f0e7c0d1a7e",
        "failed_by": "reconciler",
        "error_code": "instance_lost",
        "resume": {"project_id": "p-1", "workflow_instance_id": "wf-1", "started_at": WHEN},
        "pages_crawled": 3,
    },
    "WorkflowStatusObserved": {
        "workflow_instance_id": "wf-1",
        "status": "errored",
        "error": {"name": "WorkflowTimeoutError", "message": "Execution timed out after 1000ms"},
        "workflow_ended_at": WHEN,
        "trigger": "watchdog",
        "observed_at": WHEN,
    },
    "WorkflowProbeFailed": {
        "workflow_instance_id": "wf-1",
        "reason": "rate_limited",
        "http_status": 429,
        "detail": "More than 1200 requests per 300 seconds reached",
        "trigger": "on_demand",
        "observed_at": WHEN,
    },
    "WorkflowTerminationRequested": {
        "workflow_instance_id": "wf-1",
        "workflow": "site-audit",
        "decision": {
            "error_code": "stalled",
            "error_detail": "No progress for 45m while the instance was running",
            "failed_by": "reconciler",
            "reconciled_by": "watchdog",
            "workflow_status": "running",
            "rule": "stalled",
        },
    },
}


def envelope(kind: str = "AuditStarted", **overrides: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "event_id": EVENT_ID,
        "type": kind,
        "schema_version": 1,
        "audit_id": "a-123",
        "occurred_at": WHEN,
        "producer": "crawler",
        "causation_id": None,
        "correlation_id": None,
        "data": dict(DATA.get(kind, {})),
    }
    raw.update(overrides)
    return raw


def with_data(kind: str, **changes: Any) -> dict[str, Any]:
    return envelope(kind, data={**DATA[kind], **changes})


def rejects(raw: dict[str, Any]) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        EVENT_ADAPTER.validate_python(raw)
    with pytest.raises(ValidationError):
        EVENT_ADAPTER.validate_json(json.dumps(raw, default=str))
    return caught.value


# --- the discriminator ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(DATA))
def test_the_type_field_picks_the_event_class(kind: str) -> None:
    event = EVENT_ADAPTER.validate_json(json.dumps(envelope(kind)))

    assert type(event) is LIFECYCLE_TYPES[kind]
    assert type(event).__name__ == kind
    assert event.type == kind
    assert event.audit_id == "a-123"
    assert event.event_id == uuid.UUID(EVENT_ID)
    assert event.occurred_at == datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def test_the_lifecycle_types_are_the_design_types() -> None:
    assert set(LIFECYCLE_TYPES) == set(DATA)


@pytest.mark.parametrize("kind", ["AuditExploded", "auditstarted", "", None, "ProbeRequested"])
def test_an_unknown_type_is_rejected(kind: object) -> None:
    error = rejects(envelope("AuditStarted", type=kind))

    assert error.errors()[0]["type"] in {"union_tag_invalid", "union_tag_not_found"}


def test_a_missing_type_is_rejected() -> None:
    raw = envelope()
    del raw["type"]

    assert rejects(raw).errors()[0]["type"] == "union_tag_not_found"


def test_a_probe_request_lives_in_its_own_adapter() -> None:
    raw = envelope(
        "ProbeRequested",
        data={"workflow_instance_id": "wf-1", "trigger": "watchdog", "sweep_id": "s-1"},
    )

    request = PROBE_ADAPTER.validate_json(json.dumps(raw))

    assert isinstance(request, ProbeRequested)
    assert request.data.trigger.value == "watchdog"
    assert request.data.sweep_id == "s-1"


def test_the_data_must_match_the_type() -> None:
    rejects(envelope("AuditStarted", data=DATA["AuditProgressed"]))


# --- unknown fields -------------------------------------------------------------------------------


def test_an_unknown_envelope_field_is_rejected() -> None:
    error = rejects(envelope(priority="high"))

    assert error.errors()[0]["type"] == "extra_forbidden"
    assert error.errors()[0]["loc"][-1] == "priority"


@pytest.mark.parametrize("kind", list(DATA))
def test_an_unknown_data_field_is_rejected(kind: str) -> None:
    error = rejects(with_data(kind, surprise=1))

    assert any(e["type"] == "extra_forbidden" for e in error.errors())


# --- timestamps -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        envelope(occurred_at="2026-11-30T08:00:00"),
        envelope(occurred_at=datetime(2026, 11, 30, 8, 0)),
        with_data("AuditStarted", started_at="2026-11-30T08:00:00"),
        with_data("AuditCompleted", completed_at="2026-11-30T08:00:00"),
        with_data("WorkflowStatusObserved", observed_at="2026-11-30T08:00:00"),
        with_data("WorkflowStatusObserved", workflow_ended_at="2026-11-30T08:00:00"),
        with_data("WorkflowProbeFailed", observed_at="2026-11-30T08:00:00"),
    ],
    ids=[
        "occurred_at",
        "occurred_at-object",
        "started_at",
        "completed_at",
        "observed_at",
        "workflow_ended_at",
        "probe-observed_at",
    ],
)
def test_a_naive_timestamp_is_rejected(raw: dict[str, Any]) -> None:
    error = rejects(raw)

    assert any(e["type"] == "timezone_aware" for e in error.errors())


def test_a_timestamp_with_an_offset_keeps_its_instant_in_utc() -> None:
    event = EVENT_ADAPTER.validate_python(envelope(occurred_at="2026-11-30T10:00:00+02:00"))

    assert event.occurred_at == datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
    assert event.occurred_at.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    "when", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "1899-12-31T23:59:59Z"]
)
def test_a_timestamp_no_store_can_hold_is_rejected(when: str) -> None:
    rejects(envelope(occurred_at=when))


def test_a_timestamp_that_is_not_a_time_is_rejected() -> None:
    rejects(envelope(occurred_at="yesterday"))


# --- audit_id -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "audit_id", ["a", "a-123", "A.b_c:d-9", "x" * 128, "2026-11-30:crawl.1"], ids=str
)
def test_an_audit_id_of_1_to_128_allowed_characters_is_accepted(audit_id: str) -> None:
    assert EVENT_ADAPTER.validate_python(envelope(audit_id=audit_id)).audit_id == audit_id


@pytest.mark.parametrize(
    "audit_id",
    ["", "x" * 129, "a b", "a/b", "a?b", "é", "a\n", "\na", "a\tb", "a#1"],
    ids=repr,
)
def test_an_audit_id_outside_the_pattern_is_rejected(audit_id: str) -> None:
    error = rejects(envelope(audit_id=audit_id))

    assert error.errors()[0]["loc"] == ("AuditStarted", "audit_id")


# --- other fields ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "field", "value"),
    [
        ("AuditFailed", "error_code", "exploded"),
        ("AuditFailed", "failed_by", "crawler"),
        ("AuditFailed", "reconciled_by", "manual"),
        ("AuditFailed", "error_detail", "x" * 501),
        ("WorkflowStatusObserved", "status", "dead"),
        ("WorkflowStatusObserved", "trigger", "cron"),
        ("WorkflowProbeFailed", "reason", "bad_luck"),
        ("AuditProgressed", "pages_crawled", -1),
        ("AuditStarted", "project_id", ""),
    ],
)
def test_a_value_outside_the_contract_is_rejected(kind: str, field: str, value: object) -> None:
    error = rejects(with_data(kind, **{field: value}))

    assert error.errors()[0]["loc"][-1] == field


@pytest.mark.parametrize("field", ["event_id", "audit_id", "occurred_at", "producer"])
def test_a_missing_envelope_field_is_rejected(field: str) -> None:
    raw = envelope()
    del raw[field]

    assert rejects(raw).errors()[0]["type"] == "missing"


def test_optional_envelope_fields_have_defaults() -> None:
    raw = envelope("AuditCompleted")
    for field in ("schema_version", "causation_id", "correlation_id", "data"):
        del raw[field]

    event = EVENT_ADAPTER.validate_python(raw)

    assert isinstance(event, AuditCompleted)
    assert event.schema_version == 1
    assert event.causation_id is None and event.correlation_id is None
    assert event.data.pages_crawled is None


def test_events_are_immutable() -> None:
    event = EVENT_ADAPTER.validate_python(envelope())

    with pytest.raises(ValidationError):
        event.audit_id = "other"  # type: ignore[misc]


# --- JSON -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(DATA))
def test_every_event_survives_a_json_round_trip(kind: str) -> None:
    event = EVENT_ADAPTER.validate_python(
        envelope(kind, causation_id=str(uuid.UUID(int=1)), correlation_id=str(uuid.UUID(int=2)))
    )

    body = EVENT_ADAPTER.dump_json(event)
    again = EVENT_ADAPTER.validate_json(body)

    assert again == event
    assert type(again) is type(event)
    decoded = json.loads(body)
    assert set(decoded) == {
        "event_id",
        "type",
        "schema_version",
        "audit_id",
        "occurred_at",
        "producer",
        "causation_id",
        "correlation_id",
        "data",
    }
    assert decoded["type"] == kind
    assert decoded["event_id"] == EVENT_ID


def test_json_timestamps_are_written_in_utc() -> None:
    tz = timezone(timedelta(hours=-5))
    event = EVENT_ADAPTER.validate_python(
        envelope(occurred_at=datetime(2026, 11, 30, 3, tzinfo=tz))
    )

    decoded = json.loads(EVENT_ADAPTER.dump_json(event))

    assert decoded["occurred_at"] == "2026-11-30T08:00:00Z"


# --- the error payload ----------------------------------------------------------------------------


def test_an_error_object_with_name_and_message_is_accepted() -> None:
    event = EVENT_ADAPTER.validate_python(envelope("WorkflowStatusObserved"))

    assert isinstance(event, WorkflowStatusObserved)
    assert event.data.error == WorkflowError(
        name="WorkflowTimeoutError", message="Execution timed out after 1000ms"
    )


@pytest.mark.parametrize(
    "error",
    ["Worker exceeded CPU time limit.", {"message": "only"}, {"name": "only"}, {}, None],
    ids=["string", "message-only", "name-only", "empty-object", "none"],
)
def test_an_error_is_a_string_or_a_name_message_object(error: object) -> None:
    event = EVENT_ADAPTER.validate_json(
        json.dumps(with_data("WorkflowStatusObserved", error=error))
    )

    assert isinstance(event, WorkflowStatusObserved)
    if isinstance(error, dict):
        assert event.data.error == WorkflowError(**error)
    else:
        assert event.data.error == error
    assert EVENT_ADAPTER.validate_json(EVENT_ADAPTER.dump_json(event)) == event


@pytest.mark.parametrize("error", [42, ["a"], {"name": 1, "message": "m"}], ids=repr)
def test_an_error_of_another_shape_is_rejected(error: object) -> None:
    rejects(with_data("WorkflowStatusObserved", error=error))


# --- upcasting ------------------------------------------------------------------------------------


def test_upcast_leaves_a_current_version_unchanged() -> None:
    raw = envelope("AuditProgressed")

    assert upcast(raw) == raw


def test_upcast_treats_a_missing_version_as_1() -> None:
    raw = envelope("AuditProgressed")
    del raw["schema_version"]

    assert upcast(raw) == raw


def test_upcast_rejects_a_newer_schema_version() -> None:
    with pytest.raises(
        InvalidInput, match="schema_version 3 of AuditStarted is newer than supported"
    ):
        upcast(envelope(schema_version=3))


def test_a_version_1_start_is_upcast_to_version_2_in_the_default_workflow() -> None:
    # given a start written before audits named their workflow
    raw = envelope()

    # when it is read
    event = EVENT_ADAPTER.validate_python(upcast(raw))

    # then it is a version 2 start without a workflow: the default one
    assert isinstance(event, AuditStarted)
    assert event.schema_version == 2
    assert event.data.workflow is None
    assert "workflow" not in event.model_dump(mode="json")["data"]


def test_a_start_names_its_workflow_and_a_malformed_name_is_refused() -> None:
    event = EVENT_ADAPTER.validate_python(with_data("AuditStarted", workflow="keyword-research"))

    assert isinstance(event, AuditStarted)
    assert event.data.workflow == "keyword-research"
    rejects(with_data("AuditStarted", workflow="no/slashes"))
    rejects(with_data("AuditStarted", workflow="x" * 65))


@pytest.mark.parametrize(
    "raw",
    [envelope(type="Nope"), envelope(schema_version="1"), {"no": "type"}],
    ids=["unknown-type", "version-not-int", "no-type"],
)
def test_upcast_leaves_what_it_cannot_read_to_validation(raw: dict[str, Any]) -> None:
    assert upcast(raw) is raw


def test_upcast_walks_older_versions_up_to_the_current_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given AuditProgressed is at version 3, and v1 named its counter "pages_done"
    def v1_to_v2(raw: dict[str, Any]) -> dict[str, Any]:
        data = dict(raw["data"])
        data["pages_crawled"] = data.pop("pages_done")
        return {**raw, "data": data, "schema_version": 2}

    def v2_to_v3(raw: dict[str, Any]) -> dict[str, Any]:
        return {**raw, "schema_version": 3}

    monkeypatch.setitem(upcasting.CURRENT_VERSION, "AuditProgressed", 3)
    monkeypatch.setattr(
        upcasting,
        "UPCASTERS",
        {("AuditProgressed", 1): v1_to_v2, ("AuditProgressed", 2): v2_to_v3},
    )

    # when a v1 event is read
    raw = upcast(envelope("AuditProgressed", data={"current_phase": "crawl", "pages_done": 4}))

    # then it arrives as v3
    assert raw["schema_version"] == 3
    assert raw["data"] == {"current_phase": "crawl", "pages_crawled": 4}


def test_upcast_without_a_path_up_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(upcasting.CURRENT_VERSION, "AuditProgressed", 2)

    with pytest.raises(InvalidInput, match="no upcaster for AuditProgressed schema_version 1"):
        upcast(envelope("AuditProgressed"))


def _v1_decision(**data: Any) -> dict[str, Any]:
    body = {"error_code": "instance_lost", "error_detail": "gone", "failed_by": "reconciler"}
    return envelope("AuditFailed", schema_version=1, data={**body, **data})


@pytest.mark.parametrize(
    ("status", "rule"),
    [
        ("errored", "errored"),
        ("terminated", "terminated"),
        ("not_found", "instance_lost"),
        ("not_attached", "never_attached"),
        ("complete", "finalize_lost"),
    ],
)
def test_a_version_1_reconciler_decision_is_upcast_with_the_rule_its_evidence_shows(
    status: str, rule: str
) -> None:
    # given a decision written before decisions named their rule
    raw = _v1_decision(workflow_status=status)

    # when it is read
    event = EVENT_ADAPTER.validate_python(upcast(raw))

    # then it is the current version, naming the rule that must have fired
    assert event.schema_version == 2
    assert event.data.rule == rule


@pytest.mark.parametrize("kind", ["AuditFailed", "AuditFailureSimulated"])
def test_a_version_1_failure_not_decided_by_the_reconciler_gets_no_rule(kind: str) -> None:
    raw = envelope(
        kind,
        schema_version=1,
        data={"error_code": "oom", "error_detail": "x", "failed_by": "workflow"},
    )

    event = EVENT_ADAPTER.validate_python(upcast(raw))

    assert event.schema_version == 2
    assert event.data.rule is None


# --- derived ids ----------------------------------------------------------------------------------


def test_a_derived_id_depends_only_on_cause_and_role() -> None:
    cause = uuid.UUID(EVENT_ID)

    assert derived_id(cause, "reconciler-decision") == derived_id(EVENT_ID, "reconciler-decision")
    assert derived_id(cause, "reconciler-decision") != derived_id(cause, "other")
    assert derived_id(cause, "x") != derived_id(uuid.UUID(int=1), "x")
    assert derived_id(cause, "x").version == 5


def test_a_failure_event_needs_a_failed_by() -> None:
    data = dict(DATA["AuditFailed"])
    del data["failed_by"]

    with pytest.raises(ValidationError):
        AuditFailed.model_validate(envelope("AuditFailed", data=data))


# --- what every store can hold --------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "data", "field"),
    [
        ("AuditStarted", {"project_id": "p", "pages_total": 2**70}, "pages_total"),
        ("AuditStarted", {"project_id": "p\x00q"}, "project_id"),
        ("AuditStarted", {"project_id": "p\ud800"}, "project_id"),
        ("AuditStarted", {"project_id": "p", "start_url": "h" * 2049}, "start_url"),
        ("AuditProgressed", {"pages_crawled": -1}, "pages_crawled"),
        (
            "AuditFailed",
            {"error_code": "oom", "error_detail": "x", "failed_by": "workflow",
             "policy": {"deep": {"er": [1]}}},
            "policy",
        ),
        (
            "AuditFailed",
            {"error_code": "oom", "error_detail": "x", "failed_by": "workflow",
             "policy": {f"k{i}": i for i in range(33)}},
            "policy",
        ),
        (
            "AuditFailed",
            {"error_code": "oom", "error_detail": "x", "failed_by": "workflow",
             "failed_phase": "p" * 65},
            "failed_phase",
        ),
        (
            "WorkflowProbeFailed",
            {"reason": "timeout", "detail": "d", "trigger": "watchdog",
             "observed_at": "2026-11-30T08:00:00Z", "http_status": 10**6},
            "http_status",
        ),
    ],
)  # fmt: skip
def test_a_value_no_store_could_hold_is_refused_naming_its_field(
    kind: str, data: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        EVENT_ADAPTER.validate_python(envelope(kind, data=data))

    assert any(field in err["loc"] for err in refused.value.errors())


def test_the_largest_count_every_json_reader_keeps_exact_is_accepted() -> None:
    event = EVENT_ADAPTER.validate_python(
        envelope("AuditStarted", data={"project_id": "p", "pages_total": 2**53 - 1})
    )

    assert event.data.pages_total == 2**53 - 1
