"""Hypothesis strategies of lifecycle records for the compiled decoder's differential tests:
valid events of every type drawn from the models' own JSON Schema (optional fields present or
absent, non-ASCII text, ids of every shape, timestamps of many shapes and offsets, policy maps,
nested errors), and the same made hostile (NUL, lone surrogates, out-of-range and naive times,
extra fields, wrong types, long strings, unknown types, old versions, bad JSON, huge numbers,
duplicate keys, another spacing).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from hypothesis import strategies as st

from statemachine.events import EVENT_ADAPTER, LIFECYCLE_TYPES

__all__ = ["hostile_records", "records", "valid_events"]

_SCHEMA = EVENT_ADAPTER.json_schema()
_DEFS = _SCHEMA["$defs"]

# Text with what stores and JSON readers find hard: accents, emoji (surrogate pairs when
# escaped), right-to-left marks, BOMs, control characters; never NUL or a lone surrogate.
_TEXT = st.text(
    st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=12
) | st.sampled_from(["", "é", "🦄", "\u202e", "\ufeff", "a\nb", "\\", '"', "x" * 64])
_UUID = (
    st.integers(0, 2**128 - 1)
    .map(lambda n: uuid.UUID(int=n))
    .flatmap(lambda u: st.sampled_from([str(u), str(u).upper(), u.hex, "{" + str(u) + "}", u.urn]))
)
_DATE = st.tuples(st.integers(1, 9999), st.integers(1, 12), st.integers(1, 31)).map(
    lambda d: f"{d[0]:04d}-{d[1]:02d}-{d[2]:02d}"
)
_CLOCK = st.tuples(st.integers(0, 24), st.integers(0, 59), st.integers(0, 60)).map(
    lambda t: f"{t[0]:02d}:{t[1]:02d}:{t[2]:02d}"
)
_FRACTION = st.sampled_from(["", ".5", ".123", ".123456", ".1234564", ".9999999", ".000000001"])
_OFFSET = st.sampled_from(
    ["Z", "z", "+00:00", "-00:00", "+01:00", "-05:30", "+14:00", "+23:59", "+0100", "", "+24:00"]
)
# Mostly times every reader takes, sometimes any other shape.
_TIME = st.one_of(
    st.tuples(
        st.integers(1900, 8999),
        st.integers(1, 12),
        st.integers(1, 28),
        _CLOCK.filter(lambda c: c < "24" and not c.endswith("60")),
        st.sampled_from(["", ".5", ".123456"]),
        st.sampled_from(["Z", "+00:00", "+02:00", "-07:00"]),
    ).map(lambda t: f"{t[0]:04d}-{t[1]:02d}-{t[2]:02d}T{t[3]}{t[4]}{t[5]}"),
    st.tuples(_DATE, st.sampled_from(["T", "t", " "]), _CLOCK, _FRACTION, _OFFSET).map("".join),
)


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    return _DEFS[ref.rsplit("/", 1)[1]] if ref else schema


@st.composite
def _value(draw: st.DrawFn, schema: dict[str, Any]) -> Any:
    """A JSON value valid for ``schema`` (the subset of JSON Schema pydantic writes)."""
    schema = _resolve(schema)
    if "anyOf" in schema:
        return draw(_value(draw(st.sampled_from(schema["anyOf"]))))
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return draw(st.sampled_from(schema["enum"]))
    kind = schema.get("type")
    if kind == "object":
        return draw(_object(schema))
    if kind == "string":
        if schema.get("format") == "date-time":
            return draw(_TIME)
        if schema.get("format") == "uuid":
            return draw(_UUID)
        if "pattern" in schema:
            return draw(st.from_regex(schema["pattern"].rstrip("$") + r"\Z"))
        low, high = schema.get("minLength", 0), schema.get("maxLength", 2000)
        return draw(_TEXT.filter(lambda t: low <= len(t) <= high) | st.just("é" * high))
    if kind == "integer":
        low, high = schema.get("minimum", -(2**63)), schema.get("maximum", 2**63)
        return draw(st.integers(low, high) | st.sampled_from([low, high]))
    if kind == "number":
        return draw(st.floats(allow_nan=False, allow_infinity=False))
    if kind == "boolean":
        return draw(st.booleans())
    if kind == "null":
        return None
    raise AssertionError(f"no strategy for {schema}")


@st.composite
def _object(draw: st.DrawFn, schema: dict[str, Any]) -> dict[str, Any]:
    if "properties" not in schema:  # a policy map
        keys = st.text(max_size=8) | st.sampled_from(["grace_s", "évidence", "🦄"])
        values = _value(schema["additionalProperties"])
        return draw(st.dictionaries(keys, values, max_size=4))
    required = set(schema.get("required", []))
    out = {}
    for name, field in schema["properties"].items():
        if name in required or name == "type" or draw(st.booleans()):
            out[name] = draw(_value(field))
    return out


@st.composite
def valid_events(draw: st.DrawFn, kinds: tuple[str, ...] = ()) -> dict[str, Any]:
    """An envelope of any lifecycle type (of ``kinds``, when given), as the models' JSON
    Schema describes it."""
    kind = draw(st.sampled_from(kinds or sorted(LIFECYCLE_TYPES)))
    envelope = draw(_object(_DEFS[kind]))
    if draw(st.integers(0, 3)):  # mostly the current version, sometimes an old or odd one
        envelope.pop("schema_version", None)
        if draw(st.booleans()):
            envelope["schema_version"] = (
                LIFECYCLE_TYPES[kind].model_fields["schema_version"].default
            )
    return envelope


def _dumps(envelope: Any, style: str) -> bytes:
    if style == "compact":
        return json.dumps(envelope, ensure_ascii=False, separators=(",", ":")).encode()
    if style == "ascii":  # escapes every non-ASCII character (and pairs for emoji)
        return json.dumps(envelope).encode()
    return json.dumps(envelope, ensure_ascii=False, indent=1).encode()


@st.composite
def records(draw: st.DrawFn) -> bytes:
    """A valid event's bytes, in one of the spellings producers use."""
    envelope = draw(valid_events())
    if draw(st.booleans()):  # the tag anywhere: first, last
        kind = envelope.pop("type")
        envelope = {"type": kind, **envelope} if draw(st.booleans()) else {**envelope, "type": kind}
    return _dumps(envelope, draw(st.sampled_from(["compact", "ascii", "indented"])))


_HOSTILE_VALUES = st.one_of(
    st.just("a\x00b"),
    st.just("x" * 2049),
    st.just("é" * 501),
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**53, -1, 1.0, 1e400, True, None, [], {}, "1", "nope"]),
    _TIME,
    st.just("2026-11-30T08:00:00"),
    st.just("9999-12-31T23:59:59+14:00"),
    _UUID,
)


@st.composite
def hostile_records(draw: st.DrawFn) -> bytes:
    """A valid event broken in one of the ways careless or hostile producers break them."""
    envelope = draw(valid_events())
    how = draw(st.integers(0, 11))
    data = envelope.get("data")
    if how == 0 and isinstance(data, dict):  # a hostile value in the payload
        data[draw(st.sampled_from([*sorted(data), "unknown"]))] = draw(_HOSTILE_VALUES)
    elif how == 1:  # a hostile value in the envelope
        name = draw(st.sampled_from([*sorted(envelope), "extra"]))
        envelope[name] = draw(_HOSTILE_VALUES)
    elif how == 2:
        envelope["type"] = draw(st.sampled_from(["ProbeRequested", "NoSuch", "auditstarted", 1]))
    elif how == 3:
        envelope["schema_version"] = draw(st.sampled_from([0, 1, 2, 3, 1001, "1", 1.0]))
    elif how == 4:  # lone surrogates and NUL as escapes
        escape = draw(
            st.sampled_from(["\\ud800", "\\udfff", "\\u0000", "\\ud83e", "\\ud83e\\udd84"])
        )
        envelope["producer"] = "p-PLACE"
        return json.dumps(envelope).replace("PLACE", escape).encode()
    elif how == 5:  # a duplicate key, the last one differing
        raw = json.dumps(envelope)
        key = draw(st.sampled_from(["type", "audit_id", "occurred_at", "event_id"]))
        other = json.dumps(draw(_HOSTILE_VALUES | st.sampled_from(sorted(LIFECYCLE_TYPES))))
        return (raw[:-1] + f', "{key}": {other}}}').encode()
    elif how == 6:
        return (
            draw(st.binary(max_size=40)) + _dumps(envelope, "compact")[: draw(st.integers(0, 50))]
        )
    elif how == 7:
        return json.dumps([envelope]).encode()
    elif how == 8 and isinstance(data, dict):  # nested too deep, or a policy that is not flat
        data[draw(st.sampled_from(["policy", "error", "decision"]))] = {"k": {"k": [1]}}
    elif how == 9:
        envelope.pop(draw(st.sampled_from(sorted(envelope))))
    elif how == 10:  # a raw control character or invalid UTF-8 inside a string
        raw = _dumps(envelope, "compact")
        return raw.replace(
            b'"producer":"',
            b'"producer":"' + draw(st.sampled_from([b"\x01", b"\xff", b"\xed\xa0\x80"])),
            1,
        )
    return _dumps(envelope, draw(st.sampled_from(["compact", "ascii", "indented"])))
