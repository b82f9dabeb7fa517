"""The Python client's event builders say what auditrec's event models say: the same fields
in ``data`` (required where the model requires them), the same vocabularies, the same schema
versions; every envelope they build is one the service accepts as it was built."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

import auditrec_client
from auditrec_client import events as client_events
from consumers.operations.contracts.catalog import PUBLIC_TYPES, PUBLISHED_FAILED_BY
from consumers.operations.contracts.schemas import event_schema
from consumers.operations.publishing import validate_items
from statemachine import events as models
from statemachine.upcasting import CURRENT_VERSION
from statemachine.vocabulary import ERROR_CODES

AT = datetime(2026, 12, 1, 8, tzinfo=UTC)

BUILT: dict[str, Any] = {
    "AuditStarted": auditrec_client.AuditStarted(
        audit_id="a-1",
        project_id="p-1",
        organization_id="o-1",
        started_by_user_id="u-1",
        start_url="https://example.com/",
        workflow_instance_id="wf-1",
        started_at=AT,
        current_phase="discovery",
        pages_total=10,
    ),
    "WorkflowInstanceAttached": auditrec_client.WorkflowInstanceAttached(
        audit_id="a-1", workflow_instance_id="wf-2"
    ),
    "AuditProgressed": auditrec_client.AuditProgressed(
        audit_id="a-1", current_phase="crawl", pages_crawled=3, pages_total=10
    ),
    "AuditCompleted": auditrec_client.AuditCompleted(
        audit_id="a-1", pages_crawled=10, pages_total=10, completed_at=AT
    ),
    "AuditFailed": auditrec_client.AuditFailed(
        audit_id="a-1",
        error_code="oom",
        error_detail="Worker exceeded memory limit",
        failed_phase="crawl",
    ),
}
# What the models carry that a publisher never sends: the reconciler's own evidence, and the
# operator who failed an audit by hand and the person they acted for.
RECONCILER_ONLY = {
    "AuditFailed": {
        "reconciled_by",
        "workflow_status",
        "policy",
        "rule",
        "actor",
        "on_behalf_of",
    }
}


def _data_model(name: str) -> type[Any]:
    annotation = models.LIFECYCLE_TYPES[name].model_fields["data"].annotation
    assert isinstance(annotation, type)
    return annotation


@pytest.mark.parametrize("name", sorted(BUILT))
def test_each_builder_has_the_models_data_fields_and_required_ones(name: str) -> None:
    builder = type(BUILT[name])
    model = _data_model(name)
    envelope_fields = {f.name for f in dataclasses.fields(client_events.Event)}
    builder_fields = {
        f.name: f for f in dataclasses.fields(builder) if f.name not in envelope_fields
    }

    assert name == builder.TYPE
    assert set(builder_fields) == set(model.model_fields) - RECONCILER_ONLY.get(name, set())
    required_by_model = {n for n, f in model.model_fields.items() if f.is_required()}
    required_by_builder = {
        n
        for n, f in builder_fields.items()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    # failed_by defaults to "workflow" in the builder: the model requires it, the envelope has it
    assert required_by_builder == required_by_model - {"failed_by"}
    assert CURRENT_VERSION.get(name, 1) == builder.SCHEMA_VERSION


def test_the_vocabularies_are_the_services() -> None:
    assert auditrec_client.ERROR_CODES == ERROR_CODES
    assert client_events.FAILED_BY == PUBLISHED_FAILED_BY == ("workflow",)


@pytest.mark.parametrize("name", sorted(BUILT))
def test_every_envelope_built_is_accepted_unchanged(name: str) -> None:
    built = BUILT[name]
    envelope = built.envelope("crawler")

    [event] = validate_items([envelope])

    assert event.event_id == uuid.UUID(built.event_id)
    assert event.occurred_at == built.occurred_at
    assert event.producer == "crawler"
    assert event.schema_version == built.SCHEMA_VERSION
    assert event.data.model_dump(exclude_none=True) == {
        k: getattr(built, k) for k in envelope["data"]
    }


def test_the_id_and_time_are_fixed_when_built() -> None:
    event = auditrec_client.AuditProgressed(audit_id="a-1", pages_crawled=1)

    first, second = event.envelope(), event.envelope()

    assert first["event_id"] == second["event_id"]
    assert first["occurred_at"] == second["occurred_at"]
    assert auditrec_client.AuditProgressed(audit_id="a-1").event_id != event.event_id


@pytest.mark.parametrize(
    ("build", "named"),
    [
        (lambda: auditrec_client.AuditStarted(audit_id="a 1", project_id="p"), "audit_id"),
        (lambda: auditrec_client.AuditStarted(audit_id="a-1", project_id=""), "project_id"),
        (
            lambda: auditrec_client.AuditStarted(
                audit_id="a-1", project_id="p", workflow="site audit"
            ),
            "workflow",
        ),
        (
            lambda: auditrec_client.AuditStarted(
                audit_id="a-1", project_id="p", started_at=datetime(2026, 1, 1)
            ),
            "started_at",
        ),
        (
            lambda: auditrec_client.AuditProgressed(audit_id="a-1", pages_crawled=-1),
            "pages_crawled",
        ),
        (
            lambda: auditrec_client.AuditFailed(
                audit_id="a-1",
                error_code="boom",
                error_detail="x",  # type: ignore[arg-type]
            ),
            "error_code",
        ),
        (
            lambda: auditrec_client.AuditFailed(
                audit_id="a-1",
                error_code="oom",
                error_detail="x",
                failed_by="reconciler",  # type: ignore[arg-type]
            ),
            "failed_by",
        ),
        (lambda: auditrec_client.AuditCompleted(audit_id="a-1", event_id="nope"), "event_id"),
    ],
)
def test_a_bad_field_is_refused_naming_it(build: Any, named: str) -> None:
    with pytest.raises(ValueError, match=f"^{named}: "):
        build()


def test_offsets_other_than_utc_are_kept() -> None:
    paris = timezone(timedelta(hours=1))
    event = auditrec_client.AuditCompleted(
        audit_id="a-1", occurred_at=datetime(2026, 12, 1, 9, tzinfo=paris)
    )
    [accepted] = validate_items([event.envelope("crawler")])
    assert accepted.occurred_at == AT


@pytest.mark.parametrize("name", sorted(BUILT))
def test_every_envelope_built_follows_the_published_json_schemas(name: str) -> None:
    import jsonschema

    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    publish = jsonschema.Draft202012Validator(event_schema(name, "publish"), format_checker=checker)
    public = jsonschema.Draft202012Validator(event_schema(name, "public"), format_checker=checker)
    for event in (BUILT[name], type(BUILT[name])(**_required_only(name))):
        publish.validate(event.envelope())
        # with a producer, it is also what a Kafka producer may write to the log directly
        public.validate(event.envelope("crawler"))


def test_the_builders_are_the_public_types() -> None:
    assert set(PUBLIC_TYPES) == set(BUILT)


def _required_only(name: str) -> dict[str, Any]:
    """The built event's audit id and the fields its builder requires, nothing else."""
    builder = type(BUILT[name])
    return {
        f.name: getattr(BUILT[name], f.name)
        for f in dataclasses.fields(builder)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"type": "AuditRestored", "audit_id": "a-1", "data": {}}, "type"),
        ({"type": "WorkflowStatusObserved", "audit_id": "a-1", "data": {}}, "type"),
        (
            {"type": "AuditFailed", "audit_id": "a-1", "data": {"failed_by": "operator"}},
            "data.failed_by",
        ),
    ],
)
def test_a_raw_mapping_of_what_auditrec_writes_is_refused_before_sending(
    body: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValueError, match=f"^{field}: .* auditrec"):
        client_events.envelope_of(body, "crawler")
