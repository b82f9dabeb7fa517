"""The JSON Schemas for publishers are the models' own, and they hold: every type has its files,
every field a description and an example, and every example is valid against its schema (the
third-party ``jsonschema`` validator) and against the models themselves."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from consumers.operations.contracts.catalog import (
    OMITTABLE,
    PUBLIC_TYPES,
    PUBLISHED_FAILED_BY,
    variants_of,
)
from consumers.operations.contracts.examples import EXAMPLES
from consumers.operations.contracts.schemas import event_schema, examples_of, schema_files
from consumers.operations.publishing import validate_items
from statemachine.admission import RECONCILER_FIELDS
from statemachine.events import EVENT_TYPES, LIFECYCLE_TYPES
from statemachine.upcasting import CURRENT_VERSION

AUDITREC = str(Path(sys.executable).with_name("auditrec"))
SCHEMAS = [(name, variant) for name in EVENT_TYPES for variant in variants_of(name)]


def validator(schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )


def properties(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every property of the schema and of its nested models, as ``Model.field``."""
    for name, prop in schema["properties"].items():
        yield f"{schema['title']}.{name}", prop
    for model, body in schema.get("$defs", {}).items():
        for name, prop in body.get("properties", {}).items():
            yield f"{model}.{name}", prop


def test_every_event_type_has_its_files_and_the_index_names_them() -> None:
    files = schema_files()
    index = files["index.json"]
    assert set(index["types"]) == set(EVENT_TYPES)
    assert set(index["public"]) == set(PUBLIC_TYPES)
    assert set(index["internal"]) == set(EVENT_TYPES) - set(PUBLIC_TYPES)
    assert "ProbeRequested" in index["internal"]
    for name in EVENT_TYPES:
        expected = (
            {f"public/{name}.json", f"publish/{name}.json"}
            if name in PUBLIC_TYPES
            else {f"internal/{name}.json"}
        )
        assert {f for f in files if f.endswith(f"/{name}.json")} == expected
        entry = index["types"][name]
        assert entry["topic"] == ("lifecycle" if name in LIFECYCLE_TYPES else "probe-requests")
        assert entry["schema_version"] == CURRENT_VERSION[name]


@pytest.mark.parametrize(("name", "variant"), SCHEMAS)
def test_ids_are_versioned_per_type_and_variant(name: str, variant: str) -> None:
    schema = event_schema(name, variant)  # type: ignore[arg-type]
    version = CURRENT_VERSION[name]
    assert schema["$id"] == f"https://auditrec.dev/schemas/v{version}/{variant}/{name}.json"
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_ids_are_unique() -> None:
    ids = [event_schema(n, v)["$id"] for n, v in SCHEMAS]  # type: ignore[arg-type]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize(("name", "variant"), SCHEMAS)
def test_every_field_has_a_description_and_an_example(name: str, variant: str) -> None:
    schema = event_schema(name, variant)  # type: ignore[arg-type]
    assert schema["description"]
    missing = [
        f"{where}: {what}"
        for where, prop in properties(schema)
        for what in ("description", "examples")
        if not prop.get(what)
    ]
    # (a description is the field's docstring in statemachine/events.py; an example comes
    # from the type's example in consumers/operations/contracts/examples.py)
    assert missing == []


@pytest.mark.parametrize(("name", "variant"), SCHEMAS)
def test_the_examples_are_valid_against_the_schema_and_the_models(name: str, variant: str) -> None:
    schema = event_schema(name, variant)  # type: ignore[arg-type]
    examples = examples_of(name, variant)  # type: ignore[arg-type]
    assert examples and schema["examples"] == examples
    check = validator(schema)
    for example in examples:
        assert list(check.iter_errors(example)) == []
        if variant == "publish":
            (event,) = validate_items([example])
            assert event.type == name
        else:
            assert EVENT_TYPES[name].model_validate(example).type == name


@pytest.mark.parametrize("name", PUBLIC_TYPES)
def test_only_the_publish_variant_lets_auditrec_fill_in_the_envelope(name: str) -> None:
    minimal = examples_of(name, "publish")[0]
    assert not set(OMITTABLE) & set(minimal)
    assert list(validator(event_schema(name, "publish")).iter_errors(minimal)) == []
    errors = {e.message for e in validator(event_schema(name, "public")).iter_errors(minimal)}
    assert errors == {
        f"'{field}' is a required property" for field in ("event_id", "occurred_at", "producer")
    }


def test_the_schemas_reject_what_the_models_reject() -> None:
    check = validator(event_schema("AuditStarted", "publish"))
    good = examples_of("AuditStarted", "publish")[0]
    for bad, problem in [
        ({**good, "audit_id": "a b"}, "does not match"),
        ({**good, "colour": "red"}, "Additional properties are not allowed"),
        ({**good, "type": "AuditCompleted"}, "'AuditStarted' was expected"),
        ({**good, "data": {"workflow_instance_id": "wf-1"}}, "'project_id' is a required"),
        ({**good, "event_id": "not-a-uuid"}, "is not a 'uuid'"),
    ]:
        messages = [e.message for e in check.iter_errors(bad)]
        assert any(problem in m for m in messages), (bad, messages)
        with pytest.raises(Exception):  # noqa: B017 - the models refuse it too
            validate_items([bad])


@pytest.mark.parametrize("field", RECONCILER_FIELDS)
def test_the_publish_schema_has_no_reconciler_decision_field(field: str) -> None:
    # given a workflow's failure as a publisher sends it, with a field of a reconciler decision
    good = next(e for e in examples_of("AuditFailed", "publish") if "data" in e)
    values = {"rule": "errored", "reconciled_by": "watchdog", "workflow_status": "errored"}
    bad = {**good, "data": {**good["data"], field: values.get(field, {"a": 1})}}

    # then the publish schema rejects it (the public one, of events auditrec writes, does not)
    assert (
        field
        not in event_schema("AuditFailed", "publish")["$defs"]["AuditFailedData"]["properties"]
    )
    messages = [
        e.message for e in validator(event_schema("AuditFailed", "publish")).iter_errors(bad)
    ]
    assert any("Additional properties are not allowed" in m and field in m for m in messages)
    assert list(validator(event_schema("AuditFailed", "publish")).iter_errors(good)) == []


def test_the_schemas_describe_the_models_exactly() -> None:
    # Without what the contract adds (descriptions, examples, titles), each schema is the
    # model's own JSON Schema; `type` is required, and when publishing the omittable fields
    # are not.
    def bare(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: bare(v)
                for k, v in node.items()
                if k not in ("description", "examples", "$schema", "$id", "title", "required")
            }
        if isinstance(node, list):
            return [bare(v) for v in node]
        return node

    for name, variant in SCHEMAS:
        model = EVENT_TYPES[name].model_json_schema()
        schema = event_schema(name, variant)  # type: ignore[arg-type]
        if variant == "publish" and name == "AuditFailed":
            # what a publisher sends is only ever the workflow's failure (statemachine.admission),
            # without a reconciler decision's fields (nor the definitions only they use)
            data = model["$defs"]["AuditFailedData"]["properties"]
            data["failed_by"] = {"type": "string", "enum": list(PUBLISHED_FAILED_BY)}
            for field in RECONCILER_FIELDS:
                del data[field]
            del model["$defs"]["FailedBy"], model["$defs"]["ReconciledBy"]
        assert bare(schema) == bare(model)
        required = {"type", *model["required"]}
        if variant == "publish":
            required -= set(OMITTABLE)
        assert set(schema["required"]) == required
        for model_name, body in model.get("$defs", {}).items():
            assert schema["$defs"][model_name].get("required") == body.get("required")


def test_schema_out_writes_the_documented_layout(tmp_path: Path) -> None:
    done = subprocess.run(
        [AUDITREC, "schema", "--out", str(tmp_path / "schemas")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    written = {
        str(p.relative_to(tmp_path / "schemas")): json.loads(p.read_text())
        for p in (tmp_path / "schemas").rglob("*.json")
    }
    assert written == schema_files()
    assert sorted(p.name for p in (tmp_path / "schemas" / "publish").iterdir()) == sorted(
        f"{n}.json" for n in PUBLIC_TYPES
    )


def test_schema_prints_each_variant_by_type() -> None:
    printed = subprocess.run(
        [AUDITREC, "schema"], capture_output=True, text=True, timeout=60, check=True
    )
    grouped = json.loads(printed.stdout)
    assert set(grouped) == {"public", "publish", "internal"}
    assert set(grouped["publish"]) == set(PUBLIC_TYPES)
    assert grouped["internal"]["ProbeRequested"] == event_schema("ProbeRequested", "internal")
    one = subprocess.run(
        [AUDITREC, "schema", "--variant", "publish"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(one.stdout) == grouped["publish"]


@pytest.mark.parametrize(
    "name",
    [
        "AuditFailed",
        "AuditRestored",
        "WorkflowStatusObserved",
        "WorkflowProbeFailed",
        "ProbeRequested",
    ],
)
def test_on_behalf_of_is_written_only_when_named(name: str) -> None:
    # given an event of a type that may name the person an operator acted for
    example = EXAMPLES[name]
    named = EVENT_TYPES[name].model_validate(example)
    unnamed = named.model_copy(
        update={"data": named.data.model_copy(update={"on_behalf_of": None})}
    )

    # then the field is on the wire only when named (a reader without it reads the rest),
    # and what is written reads back as the same event
    assert json.loads(named.model_dump_json())["data"]["on_behalf_of"] == "alice"
    assert "on_behalf_of" not in json.loads(unnamed.model_dump_json())["data"]
    assert "on_behalf_of" not in unnamed.model_dump(mode="json")["data"]
    assert EVENT_TYPES[name].model_validate_json(unnamed.model_dump_json()) == unnamed
