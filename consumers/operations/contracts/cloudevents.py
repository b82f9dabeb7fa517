"""CloudEvents 1.0 at the edge: ``POST /events`` in structured mode
(``application/cloudevents+json``), batch mode (``application/cloudevents-batch+json``) and
binary mode (``ce-*`` headers, the event's data as the JSON body), each event mapped to
auditrec's envelope and then validated and published exactly as a plain envelope is.

=================  ===========================================================================
CloudEvents        envelope
=================  ===========================================================================
``type``           ``type``: the bare name (``AuditStarted``) or ``dev.auditrec.AuditStarted``
``subject``        ``audit_id`` (required)
``id``             ``event_id`` when it is a UUID; otherwise the uuid5 of ``source`` and ``id``,
                   so the same event sent twice keeps one id (CloudEvents identify an event
                   by source and id)
``source``         ``producer``
``time``           ``occurred_at`` (optional: filled in as for a plain envelope)
``data``           ``data`` (a JSON object; ``data_base64`` is refused)
``schemaversion``  ``schema_version`` (extension, optional)
``causationid``    ``causation_id`` (extension, optional)
``correlationid``  ``correlation_id`` (extension, optional)
=================  ===========================================================================

``specversion`` must be ``1.0``; ``datacontenttype`` (binary mode: ``Content-Type``), when
given, must be JSON; ``dataschema`` and any other extension attribute are accepted and not
kept. A problem is reported under the CloudEvents attribute's name (``subject: …``).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import unquote

from consumers.operations.publishing import validate_items
from statemachine.errors import InvalidInput
from statemachine.events import AuditEvent

__all__ = [
    "BATCH",
    "CLOUDEVENT_SCHEMA",
    "STRUCTURED",
    "TYPE_PREFIX",
    "envelope_of",
    "is_binary",
    "structured_of_binary",
    "validate_cloudevents",
]

STRUCTURED: Final = "application/cloudevents+json"
BATCH: Final = "application/cloudevents-batch+json"
TYPE_PREFIX: Final = "dev.auditrec."
_REQUIRED: Final = ("specversion", "id", "source", "type")
_EXTENSIONS: Final = {
    "schemaversion": "schema_version",
    "causationid": "causation_id",
    "correlationid": "correlation_id",
}
# The envelope's names back to the attributes a CloudEvents sender used.
_ATTRIBUTE_OF: Final = {
    "audit_id": "subject",
    "event_id": "id",
    "producer": "source",
    "occurred_at": "time",
    **{field: attribute for attribute, field in _EXTENSIONS.items()},
}
_RENAME: Final = re.compile(r"(^|; )(" + "|".join(_ATTRIBUTE_OF) + r")(?=[:.])")
_JSON: Final = re.compile(r"^application/([a-z0-9.+-]*\+)?json$")
# Ids of CloudEvents whose `id` is not a UUID: uuid5(_NAMESPACE, "<source> <id>").
_NAMESPACE: Final = uuid.UUID("3f7c2a4e-9b1d-5e6f-8a0c-1d2e3f4a5b6c")


# A CloudEvent as POST /events takes it (OpenAPI): the attributes auditrec reads.
CLOUDEVENT_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "description": "A CloudEvents 1.0 event (structured mode) carrying one auditrec event.",
    "required": ["specversion", "id", "source", "type", "subject"],
    "properties": {
        "specversion": {"type": "string", "const": "1.0"},
        "id": {"type": "string", "description": "The event id (a UUID, else hashed with source)."},
        "source": {"type": "string", "description": "The producer."},
        "type": {
            "type": "string",
            "description": "The event type: `AuditStarted` or `dev.auditrec.AuditStarted`.",
        },
        "subject": {"type": "string", "description": "The audit id."},
        "time": {"type": "string", "format": "date-time", "description": "occurred_at."},
        "datacontenttype": {"type": "string", "description": "application/json when given."},
        "data": {"type": "object", "description": "The event's data."},
        "schemaversion": {"type": "integer", "description": "The envelope's schema_version."},
        "causationid": {"type": "string", "format": "uuid"},
        "correlationid": {"type": "string", "format": "uuid"},
    },
    "example": {
        "specversion": "1.0",
        "id": "0b7e6a52-8d8e-4e0c-9a7b-3f1d2c4b5a69",
        "source": "crawler",
        "type": "AuditStarted",
        "subject": "a-123",
        "time": "2026-11-30T08:00:00Z",
        "datacontenttype": "application/json",
        "data": {"project_id": "p-1", "workflow_instance_id": "wf-a-123"},
    },
}


def _is_json(content_type: str) -> bool:
    return _JSON.match(content_type.split(";", 1)[0].strip().lower()) is not None


def _event_id(source: str, event_id: str) -> str:
    try:
        return str(uuid.UUID(event_id))
    except ValueError:
        return str(uuid.uuid5(_NAMESPACE, f"{source} {event_id}"))


def envelope_of(event: Any) -> dict[str, Any]:
    """The envelope a structured CloudEvent stands for; :class:`InvalidInput` naming each
    attribute that is missing or wrong (the envelope itself is validated afterwards)."""
    if not isinstance(event, dict):
        raise InvalidInput("expected a JSON object (a CloudEvent)")
    problems = [f"{a}: required CloudEvents attribute missing" for a in _REQUIRED if a not in event]
    for attribute in ("specversion", "id", "source", "type", "subject", "time"):
        value = event.get(attribute)
        if attribute in event and (not isinstance(value, str) or not value):
            problems.append(f"{attribute}: must be a non-empty string")
    if isinstance(event.get("specversion"), str) and event["specversion"] != "1.0":
        problems.append(f"specversion: must be '1.0' (got {event['specversion']!r})")
    if "subject" not in event:
        problems.append("subject: required: the audit id")
    content_type = event.get("datacontenttype")
    if content_type is not None and (
        not isinstance(content_type, str) or not _is_json(content_type)
    ):
        problems.append(f"datacontenttype: must be JSON (application/json), not {content_type!r}")
    if "data_base64" in event:
        problems.append("data_base64: binary data is not accepted; send the data as JSON (data)")
    if "data" in event and not isinstance(event["data"], dict):
        problems.append("data: must be a JSON object (the event's data)")
    if problems:
        raise InvalidInput("; ".join(problems))
    kind = event["type"].removeprefix(TYPE_PREFIX)
    envelope: dict[str, Any] = {
        "event_id": _event_id(event["source"], event["id"]),
        "type": kind,
        "audit_id": event["subject"],
        "producer": event["source"],
    }
    if "time" in event:
        envelope["occurred_at"] = event["time"]
    if "data" in event:
        envelope["data"] = event["data"]
    for attribute, field in _EXTENSIONS.items():
        if attribute in event:
            value = event[attribute]
            envelope[field] = int(value) if isinstance(value, str) and value.isdigit() else value
    return envelope


def is_binary(headers: Mapping[str, str]) -> bool:
    """Whether a request is a CloudEvent in binary mode (it carries ``ce-specversion``)."""
    return "ce-specversion" in headers


def structured_of_binary(headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
    """The structured form of a binary-mode CloudEvent: ``ce-*`` headers (percent-decoded) as
    attributes, ``Content-Type`` as ``datacontenttype``, the JSON body as ``data``."""
    event: dict[str, Any] = {
        name.lower().removeprefix("ce-"): unquote(value)
        for name, value in headers.items()
        if name.lower().startswith("ce-")
    }
    content_type = headers.get("content-type")
    if content_type:
        event["datacontenttype"] = content_type
    if content_type and not _is_json(content_type):
        return event  # named by envelope_of
    if body.strip():
        try:
            event["data"] = json.loads(body)
        except (ValueError, RecursionError):
            raise InvalidInput("body: not valid JSON (the event's data)") from None
    return event


def _in_cloudevents_terms(problem: str) -> str:
    head, sep, rest = problem.partition(": ")
    return f"{head}{sep}{_RENAME.sub(lambda m: m[1] + _ATTRIBUTE_OF[m[2]], rest)}"


def validate_cloudevents(
    events: Sequence[Any], *, actor: str | None, base: int = 0
) -> list[AuditEvent]:
    """Map and validate every CloudEvent sent by ``actor`` (who authenticated); any problem
    rejects them all with :class:`InvalidInput`, one ``item N: …`` line per problem, in
    CloudEvents terms."""
    problems: list[str] = []
    envelopes: list[dict[str, Any]] = []
    for index, event in enumerate(events):
        try:
            envelopes.append(envelope_of(event))
        except InvalidInput as exc:
            problems.append(f"item {index + base}: {exc}")
    if problems:
        raise InvalidInput(f"{len(problems)} invalid item(s); nothing published", problems)
    try:
        return validate_items(
            envelopes, actor=actor, label="item", producer="auditrec-api", base=base
        )
    except InvalidInput as exc:
        problems = [_in_cloudevents_terms(p) for p in exc.problems]
        raise type(exc)(str(exc), problems) from None
