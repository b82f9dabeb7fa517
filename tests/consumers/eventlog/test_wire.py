"""The compiled decoder (consumers/eventlog/wire) against pydantic's path: on every record,
valid or hostile, it either gives up or gives a view that reads exactly as pydantic's model
(every field an equal value of the identical type, tzinfo ``datetime.UTC`` itself, the enum
members themselves); and ``codec.read`` gives what ``codec.decode`` gives, event or error
message. Its structs are generated from the models, and agree with them field by field.
"""

from __future__ import annotations

import enum
import json
import re
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints

from consumers.eventlog import codec
from consumers.eventlog.wire import VIEWS, decode_view
from consumers.eventlog.wire.structs import spec_for
from statemachine.errors import DecodeError
from statemachine.events import LIFECYCLE_TYPES, AuditFailed, AuditStarted
from tests.consumers.eventlog.wire_events import hostile_records, records
from tests.fuzz.hostile import FUZZ_EXAMPLES

PROFILE = settings(
    max_examples=max(FUZZ_EXAMPLES * 2, 300),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _outcome(decode: Any, value: bytes) -> Any:
    try:
        return decode(value)
    except DecodeError as exc:
        return f"DecodeError: {exc}"


def _assert_reads_as(view: Any, model: Any, where: str = "event") -> None:
    """``view`` reads as ``model``: every field of the model, all the way down, an equal value
    of the same type (UUIDs, enum members, UTC timestamps, nested models as their structs)."""
    if isinstance(model, BaseModel):
        if isinstance(view, BaseModel):  # pydantic's path: the model itself
            assert type(view) is type(model) and view == model, where
            return
        assert isinstance(view, msgspec.Struct), where
        assert type(view).__name__ in (f"{type(model).__name__}{s}" for s in ("View", "Wire"))
        for name in type(model).model_fields:
            _assert_reads_as(getattr(view, name), getattr(model, name), f"{where}.{name}")
        return
    assert type(view) is type(model), where
    if isinstance(model, datetime):
        assert view == model and view.tzinfo is UTC and model.tzinfo is UTC, where
    elif isinstance(model, enum.Enum):
        assert view is model, where
    elif isinstance(model, dict):
        assert list(view.items()) == list(model.items()), where
        for key in model:
            _assert_reads_as(view[key], model[key], f"{where}[{key!r}]")
    else:
        assert view == model, where
        if isinstance(model, float):
            assert repr(view) == repr(model), where  # -0.0 stays -0.0


def _check(value: bytes) -> Any:
    reference = _outcome(codec.decode, value)
    view = decode_view(value, strict=True)
    if view is not None:  # taken only when pydantic takes it, and then read the same
        assert not isinstance(reference, str), (value, reference)
        _assert_reads_as(view, reference)
    for read in (codec.read, codec.read_verbatim):
        outcome = _outcome(read, value)
        if isinstance(reference, str):
            assert outcome == reference  # the same error, in the same words
            continue
        event, body = outcome if read is codec.read_verbatim else (outcome, None)
        _assert_reads_as(event, reference)
        if read is codec.read_verbatim:
            assert body == codec.decode_verbatim(value)[1] or (view is not None and body == value)
    return view


@PROFILE
@given(records())
def test_valid_records_decode_as_pydantic_decodes_them(value: bytes) -> None:
    _check(value)


@PROFILE
@given(records())
def test_an_event_is_encoded_as_pydantic_dumps_it(value: bytes) -> None:
    try:
        event = codec.decode(value)
    except DecodeError:
        return
    out = codec.encode("lifecycle", event)
    assert out.value == event.model_dump_json().encode()
    assert codec.decode(out.value) == event


@PROFILE
@given(hostile_records())
@example(
    b'{"type":"WorkflowInstanceAttached","event_id":"0b9b5a3e-3c1f-4a52-9b9e-1f6d2a7c8e01",'
    b'"audit_id":"a-1","occurred_at":"2026-11-30T08:00:00Z","producer":"p"}'
)
@example(
    b'{"type":"AuditProgressed","event_id":"0b9b5a3e-3c1f-4a52-9b9e-1f6d2a7c8e01",'
    b'"audit_id":"a-1\\n","occurred_at":"2026-11-30T08:00:00Z","producer":"p","data":{}}'
)
@example(
    b'{"type":"AuditProgressed","event_id":"0b9b5a3e-3c1f-4a52-9b9e-1f6d2a7c8e01",'
    b'"audit_id":"a-1","occurred_at":"2026-11-30T08:00:00.9999999Z","producer":"p","data":{}}'
)
@example(
    b'{"type":"AuditProgressed","event_id":"0b9b5a3e-3c1f-4a52-9b9e-1f6d2a7c8e01",'
    b'"audit_id":"a-1","occurred_at":"2026-11-30T08:00:00Z","producer":"p\\u0000","data":{}}'
)
def test_hostile_records_decode_as_pydantic_decodes_them(value: bytes) -> None:
    _check(value)


def _canonical(kind: str) -> bytes:
    data = {
        "AuditStarted": {"project_id": "p", "start_url": "https://é.example/🦄"},
        "AuditFailed": {
            "error_code": "oom",
            "error_detail": "d",
            "failed_by": "reconciler",
            "policy": {"grace_s": 600.0, "n": 3, "on": True, "why": "é", "none": None},
        },
        "WorkflowStatusObserved": {
            "status": "errored",
            "trigger": "watchdog",
            "observed_at": "2026-11-30T09:00:00.5+02:00",
            "error": {"name": "Error", "message": "OOM"},
        },
    }.get(kind)
    raw = {
        "event_id": str(uuid.uuid4()),
        "type": kind,
        "audit_id": "a-1",
        "producer": "p",
        "occurred_at": "2026-11-30T08:00:00Z",
        "data": data,
    }
    return json.dumps(raw).encode()


@pytest.mark.parametrize("kind", ["AuditStarted", "AuditFailed", "WorkflowStatusObserved"])
def test_what_auditrec_writes_takes_the_fast_path(kind: str) -> None:
    # given an event as encode() writes it (every field, current version), and as others do
    event = codec.decode(_canonical(kind))
    for value in (codec.encode("t", event).value, _canonical(kind)):
        # then the compiled decoder takes it, identical to pydantic's
        view = decode_view(value, strict=True)
        assert view is not None, value
        _assert_reads_as(view, codec.decode(value))


def test_older_versions_are_left_to_pydantic_which_upcasts_them() -> None:
    value = json.loads(_canonical("AuditFailed"))
    value["schema_version"] = 1
    value["data"]["workflow_status"] = "not_found"
    old = json.dumps(value).encode()
    assert decode_view(old) is None
    event = codec.decode(old)
    assert type(event) is AuditFailed and event.schema_version == 2
    assert event.data.rule == "instance_lost"
    assert codec.decode_verbatim(old)[1] is None


def test_every_lifecycle_model_has_a_struct_with_its_fields() -> None:
    assert list(VIEWS) == list(LIFECYCLE_TYPES)
    tags = {model: tag for tag, model in LIFECYCLE_TYPES.items()}
    seen: list[type[BaseModel]] = list(LIFECYCLE_TYPES.values())
    for model in seen:
        spec = spec_for(model, tags.get(model))
        assert [f.name for f in spec.fields] == list(model.model_fields)
        assert spec.struct.__struct_fields__ == tuple(model.model_fields)
        for f in spec.fields:
            info = model.model_fields[f.name]
            assert f.required == (info.is_required() or f.name == "type"), (model, f.name)
            if not f.required:
                assert f.default is info.default, (model, f.name)
            seen.extend(m for m in f.nested if m not in seen)
    assert {m.__name__ for m in seen} >= {"WorkflowError", "AuditStartedData", "HeldRelease"}


def _constraints(schema: Any, defs: dict[str, Any], out: set[Any]) -> set[Any]:
    """The constraints in a JSON Schema, wherever they sit in it."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[1].removesuffix("Wire")
            out.add(("ref", name))
            target = defs[schema["$ref"].rsplit("/", 1)[1]]
            if "enum" in target:
                out.add(("enum", tuple(sorted(target["enum"]))))
        for key, value in schema.items():
            if key in ("maxLength", "minLength", "minimum", "maximum", "maxProperties"):
                if abs(value) < 1.7e308:  # msgspec's bounds for finite floats
                    out.add((key, value))
            elif key == "enum":
                out.add(("enum", tuple(sorted(value))))
            elif key == "const":
                out.add(("enum", (value,)))
            elif key in ("format", "type") and isinstance(value, str):
                out.add((key, value))
            elif isinstance(value, dict | list) and key not in ("$defs", "default"):
                _constraints(value, defs, out)
    elif isinstance(schema, list):
        for item in schema:
            _constraints(item, defs, out)
    return out


def _normal(constraints: set[Any]) -> set[Any]:
    # how each library spells the same thing: the type of an enum's values, a nullable field
    if any(key == "enum" for key, _ in constraints):
        constraints -= {("type", "string"), ("type", "integer")}
    return constraints - {("type", "null")}


@pytest.mark.parametrize("kind", sorted(LIFECYCLE_TYPES))
def test_structs_check_what_the_models_check(kind: str) -> None:
    # the JSON Schemas of a model and of its struct name the same constraints, field by field
    model = LIFECYCLE_TYPES[kind]
    (ours,), ours_defs = msgspec.json.schema_components([spec_for(model, kind).struct])
    theirs = model.model_json_schema()
    models: list[tuple[dict[str, Any], dict[str, Any]]] = [
        (ours_defs[ours["$ref"].rsplit("/", 1)[1]], theirs)
    ]
    while models:
        struct_schema, model_schema = models.pop()
        assert set(struct_schema["properties"]) == set(model_schema["properties"])
        model_defs = theirs.get("$defs", {})
        for name, field in model_schema["properties"].items():
            if name == "schema_version":  # the struct takes only the current one
                assert struct_schema["properties"][name]["enum"] == [
                    model.model_fields[name].default
                ]
                continue
            mine = _normal(_constraints(struct_schema["properties"][name], ours_defs, set()))
            expected = _normal(_constraints(field, model_defs, set()))
            pattern = re.search(r"\{(\d+),(\d+)\}\$", json.dumps(field))
            if pattern:  # an id or a name: lengths and a character set
                low, high = (int(n) for n in pattern.groups())
                expected |= {("minLength", low), ("maxLength", high)}
            assert mine == expected, (kind, name)
        for name in struct_schema["properties"]:
            ref = struct_schema["properties"][name].get("$ref")
            if ref and ref.endswith("Wire") and "$defs" in theirs:
                models.append(
                    (
                        ours_defs[ref.rsplit("/", 1)[1]],
                        model_defs[ref.rsplit("/", 1)[1].removesuffix("Wire")],
                    )
                )


def test_a_validator_the_decoder_does_not_know_stops_it_at_import() -> None:
    class Shouting(BaseModel):
        model_config = ConfigDict(frozen=True, extra="forbid")
        text: Annotated[str, AfterValidator(str.upper)]

    with pytest.raises(TypeError, match="does not know"):
        spec_for(Shouting)

    class Patterned(BaseModel):
        model_config = ConfigDict(frozen=True, extra="forbid")
        code: Annotated[str, StringConstraints(pattern=r"^\w+$")]

    with pytest.raises(TypeError, match="not one character class"):
        spec_for(Patterned)


def test_a_view_reads_like_its_model_down_to_nested_data() -> None:
    event = decode_view(_canonical("AuditStarted"))
    assert type(event) is VIEWS["AuditStarted"] and event.type == "AuditStarted"
    assert type(event.event_id) is uuid.UUID and event.occurred_at.tzinfo is UTC
    assert event.data.start_url == "https://é.example/🦄" and event.data.current_phase is None
    # a nested default is read as its struct, shared, never a model
    raw = json.loads(_canonical("AuditCompleted"))
    del raw["data"]
    value = json.dumps(raw).encode()
    completed = decode_view(value, strict=True)
    assert completed is not None and not isinstance(completed.data, BaseModel)
    _assert_reads_as(completed, codec.decode(value))


def test_a_fault_of_the_fast_path_falls_back_to_pydantic(monkeypatch: pytest.MonkeyPatch) -> None:
    # given a reader with a bug
    import consumers.eventlog.wire as wire

    def broken(struct: Any) -> Any:
        raise AttributeError("a bug")

    monkeypatch.setitem(wire._READ, "AuditStarted", broken)
    value = _canonical("AuditStarted")
    # then the record is still read, by pydantic, and the fault shows only when asked for
    assert decode_view(value) is None
    assert type(codec.read(value)) is AuditStarted
    with pytest.raises(AttributeError):
        decode_view(value, strict=True)
