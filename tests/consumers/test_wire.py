"""The compiled decoder (consumers/eventlog/wire) against pydantic's path: on every record,
valid or hostile, it either gives up or gives exactly what pydantic gives (equal models of
identical types, the same fields set, tzinfo ``datetime.UTC`` itself, the enum members
themselves); and ``codec.decode`` gives what pydantic alone gives, event or error message.
Its structs are generated from the models, and agree with them field by field.
"""

from __future__ import annotations

import enum
import json
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints

from consumers.eventlog import codec
from consumers.eventlog.wire import STRUCTS, decode_fast
from consumers.eventlog.wire.structs import spec_for
from statemachine.errors import DecodeError
from statemachine.events import LIFECYCLE_TYPES, AuditFailed, AuditStarted
from tests.consumers.wire_events import hostile_records, records
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


def _assert_identical(fast: Any, slow: Any, where: str = "event") -> None:
    """Equal, and of the same types all the way down (models, UUIDs, enum members, tzinfo)."""
    assert type(fast) is type(slow), where
    if isinstance(slow, BaseModel):
        assert fast == slow, where
        assert fast.model_fields_set == slow.model_fields_set, where
        assert fast.__pydantic_extra__ is None and slow.__pydantic_extra__ is None
        assert object.__getattribute__(fast, "__pydantic_private__") is None
        assert list(fast.__dict__) == list(slow.__dict__), where
        for name in type(slow).model_fields:
            _assert_identical(getattr(fast, name), getattr(slow, name), f"{where}.{name}")
    elif isinstance(slow, datetime):
        assert fast == slow and fast.tzinfo is UTC and slow.tzinfo is UTC, where
    elif isinstance(slow, enum.Enum):
        assert fast is slow, where
    elif isinstance(slow, dict):
        assert list(fast.items()) == list(slow.items()), where
        for key in slow:
            _assert_identical(fast[key], slow[key], f"{where}[{key!r}]")
    else:
        assert fast == slow, where
        if isinstance(slow, float):
            assert repr(fast) == repr(slow), where  # -0.0 stays -0.0


def _check(value: bytes) -> Any:
    reference = _outcome(codec.validate, value)
    fast = decode_fast(value, strict=True)
    if fast is not None:  # taken only when pydantic takes it, and then identical
        assert not isinstance(reference, str), (value, reference)
        _assert_identical(fast, reference)
        assert fast.model_dump() == reference.model_dump()
        assert fast.model_dump_json() == reference.model_dump_json()
    assert _outcome(codec.decode, value) == reference or _same_event(codec.decode, value)
    verbatim = _outcome(codec.decode_verbatim, value)
    if isinstance(reference, str):
        assert verbatim == reference
    else:
        _assert_identical(verbatim[0], reference)
    return fast


def _same_event(decode: Any, value: bytes) -> bool:
    _assert_identical(decode(value), codec.validate(value))
    return True


@PROFILE
@given(records())
def test_valid_records_decode_as_pydantic_decodes_them(value: bytes) -> None:
    _check(value)


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
    event = codec.validate(_canonical(kind))
    for value in (codec.encode("t", event).value, _canonical(kind)):
        # then the compiled decoder takes it, identical to pydantic's
        fast = decode_fast(value, strict=True)
        assert fast is not None, value
        _assert_identical(fast, codec.validate(value))


def test_older_versions_are_left_to_pydantic_which_upcasts_them() -> None:
    value = json.loads(_canonical("AuditFailed"))
    value["schema_version"] = 1
    value["data"]["workflow_status"] = "not_found"
    old = json.dumps(value).encode()
    assert decode_fast(old) is None
    event = codec.decode(old)
    assert type(event) is AuditFailed and event.schema_version == 2
    assert event.data.rule == "instance_lost"
    assert codec.decode_verbatim(old)[1] is None


def test_every_lifecycle_model_has_a_struct_with_its_fields() -> None:
    assert len(STRUCTS) == len(LIFECYCLE_TYPES)
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
            if "pattern" in json.dumps(field):  # the audit id: lengths and a character set
                expected |= {("minLength", 1), ("maxLength", 128)}
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


def test_the_envelope_type_and_data_come_back_as_the_models_classes() -> None:
    event = decode_fast(_canonical("AuditStarted"))
    assert type(event) is AuditStarted
    assert type(event.event_id) is uuid.UUID and event.occurred_at.tzinfo is UTC


def test_a_fault_of_the_fast_path_falls_back_to_pydantic(monkeypatch: pytest.MonkeyPatch) -> None:
    # given a builder with a bug
    import consumers.eventlog.wire as wire

    def broken(struct: Any) -> Any:
        raise AttributeError("a bug")

    monkeypatch.setitem(wire._BUILD, "AuditStarted", broken)
    value = _canonical("AuditStarted")
    # then the record still decodes, by pydantic, and the fault shows only when asked for
    assert decode_fast(value) is None
    _assert_identical(codec.decode(value), codec.validate(value))
    with pytest.raises(AttributeError):
        decode_fast(value, strict=True)
