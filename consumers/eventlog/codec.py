"""Events to records and back: the wire format of every topic.

:func:`encode` writes an event as UTF-8 JSON with the ``event-type`` and ``schema-version``
headers; :func:`decode` reads any version of any lifecycle event (old versions upcast) and
raises :class:`~statemachine.errors.DecodeError` naming the problem; :func:`read` does the same
for consumers that only fold and store events (a view of the event when it can:
:mod:`consumers.eventlog.wire`); :func:`dead_letter` wraps a record that could not be decoded
or applied, with the reason and where it came from.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from pydantic import BaseModel, ValidationError

from consumers.eventlog.dead_letters import LETTER_HEADER
from consumers.eventlog.port import OutRecord, Record, Topics
from consumers.eventlog.wire import decode_view
from statemachine.errors import DecodeError, InvalidInput
from statemachine.events import (
    EVENT_ADAPTER,
    EVENT_TYPES,
    PROBE_ADAPTER,
    AuditEvent,
    ProbeRequested,
)
from statemachine.upcasting import CURRENT_VERSION, upcast
from statemachine.vocabulary import AUDIT_ID_RULE

__all__ = [
    "DEAD_LETTER_ORIGINAL_MAX",
    "dead_letter",
    "decode",
    "decode_probe",
    "decode_verbatim",
    "describe",
    "encode",
    "read",
    "read_verbatim",
]


def encode(topic: str, event: BaseModel, partition: int | None = None) -> OutRecord:
    """``event`` as a record of ``topic``, keyed by its audit id (``partition``: see
    :class:`~consumers.eventlog.port.OutRecord`)."""
    value = event.model_dump_json().encode()
    kind = getattr(event, "type", "")
    version = str(getattr(event, "schema_version", 1))
    return OutRecord(
        topic=topic,
        key=getattr(event, "audit_id"),  # noqa: B009 - every envelope has one
        value=value,
        headers=(("event-type", kind.encode()), ("schema-version", version.encode())),
        partition=partition,
    )


def _loads(value: bytes) -> dict[str, Any]:
    try:
        raw = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DecodeError(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise DecodeError("not valid JSON: nested too deeply") from None
    if not isinstance(raw, dict):
        raise DecodeError("not a JSON object")
    try:
        return upcast(raw)
    except InvalidInput as exc:
        raise DecodeError(str(exc)) from None


def describe(exc: ValidationError) -> str:
    """A validation error as ``field.path: problem; …``, without the union's type tag."""
    parts = []
    for err in exc.errors()[:5]:
        loc = list(err["loc"])
        if loc and loc[0] in EVENT_TYPES:
            loc = loc[1:]
        where = ".".join(str(p) for p in loc) or "(root)"
        message = err["msg"]
        if err["type"] == "string_pattern_mismatch" and loc == ["audit_id"]:
            message = AUDIT_ID_RULE
        elif err["type"] == "union_tag_invalid":
            where = "type"
            message = (
                f"unknown event type {err['input'].get('type')!r}"
                if isinstance(err.get("input"), dict)
                else message
            )
        parts.append(f"{where}: {message}")
    return "; ".join(parts)


def decode(value: bytes) -> AuditEvent:
    """A lifecycle event from a record's bytes, or :class:`DecodeError` with the reason."""
    try:  # current-version JSON, parsed and validated in one pass
        event: AuditEvent = EVENT_ADAPTER.validate_json(value)
        if event.schema_version == CURRENT_VERSION[event.type]:
            return event
    except ValidationError:
        pass
    return _upcast_or_reject(value)


def decode_verbatim(value: bytes) -> tuple[AuditEvent, bytes | None]:
    """:func:`decode`, and ``value`` itself when it is valid current-version JSON of the
    event (so it can be stored as the event's JSON without serialising it again); ``None``
    when the event had to be upcast."""
    try:  # current-version JSON, parsed and validated in one pass
        event: AuditEvent = EVENT_ADAPTER.validate_json(value)
        if event.schema_version == CURRENT_VERSION[event.type]:
            return event, value
    except ValidationError:
        pass
    return _upcast_or_reject(value), None


def read(value: bytes) -> AuditEvent:
    """:func:`decode` for a consumer that only reads the event's fields (folds it, stores it):
    a current-version event comes as its view (:func:`consumers.eventlog.wire.decode_view`),
    which reads like the model (the same attributes, values and types) but is not one: no
    pydantic methods, not of the model's class (tell events apart by ``type``). Anything else
    is :func:`decode`'s, errors included."""
    view: AuditEvent | None = decode_view(value)
    return view if view is not None else decode(value)


def read_verbatim(value: bytes) -> tuple[AuditEvent, bytes | None]:
    """:func:`read`, with the JSON as :func:`decode_verbatim` gives it (a view is always of
    valid current-version JSON: ``value`` itself)."""
    view: AuditEvent | None = decode_view(value)
    return (view, value) if view is not None else decode_verbatim(value)


def _upcast_or_reject(value: bytes) -> AuditEvent:
    """The slow path: an older version upcast, or :class:`DecodeError` naming the problem."""
    raw = _loads(value)
    try:
        return EVENT_ADAPTER.validate_python(raw)
    except ValidationError as exc:
        raise DecodeError(describe(exc)) from None


def decode_probe(value: bytes) -> ProbeRequested:
    raw = _loads(value)
    try:
        return PROBE_ADAPTER.validate_python(raw)
    except ValidationError as exc:
        raise DecodeError(describe(exc)) from None


DEAD_LETTER_ORIGINAL_MAX = 256 * 1024


def dead_letter(topics: Topics, record: Record, consumer: str, error: str) -> OutRecord:
    """The dead-letter record for ``record``: original bytes, where it came from, and why.

    It is keyed by the source position (``topic:partition:offset``) and names it in the
    ``dead-letter-of`` header, so that every record about one source record lands in one
    partition of the dead-letter topic, where the log keeps it once however many consumers
    set it aside (:mod:`consumers.eventlog.letters`; the records read back:
    :mod:`consumers.eventlog.dead_letters`). ``consumer`` and ``error`` are the first
    reason; ``reasons`` lists every consumer's (later ones are added by reason notes).

    The original is kept as text when it is UTF-8, else base64. Past
    :data:`DEAD_LETTER_ORIGINAL_MAX` bytes it is cut (``original_truncated``, with the full
    ``original_size``): the dead letter must always fit where the original did, or a large bad
    record could never be set aside. The source position leads back to the whole record.
    """
    original = record.value[:DEAD_LETTER_ORIGINAL_MAX]
    error = error[:2000]
    body: dict[str, object] = {
        "source_topic": record.topic,
        "source_partition": record.partition,
        "source_offset": record.offset,
        "key": record.key,
        "consumer": consumer,
        "error": error,
        "reasons": [{"consumer": consumer, "error": error}],
        "original_size": len(record.value),
        "original_truncated": len(original) < len(record.value),
    }
    try:
        body["original"] = original.decode()
    except UnicodeDecodeError:
        body["original_base64"] = base64.b64encode(original).decode()
    origin = f"{record.topic}/{record.partition}@{record.offset}"
    return OutRecord(
        topic=topics.dead_letter,
        key=f"{record.topic}:{record.partition}:{record.offset}",
        value=json.dumps(body).encode(),
        headers=(("consumer", consumer.encode()), (LETTER_HEADER, origin.encode())),
    )
