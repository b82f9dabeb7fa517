"""The events a publisher sends, as typed builders: ``AuditStarted``, ``WorkflowInstanceAttached``,
``AuditProgressed``, ``AuditCompleted`` and ``AuditFailed``.

An event's ``event_id`` and ``occurred_at`` are fixed when it is built, not when it is sent:
auditrec applies each ``event_id`` once, so publishing the same built event again (a retry
after a dropped connection, or a caller's own second attempt) never records it twice.

The builders check what a publisher most often gets wrong (an audit id auditrec refuses, a
naive timestamp, an error code or a ``failed_by`` it does not know, a negative count) at
construction, with a ``ValueError`` naming the field; a raw mapping of a type auditrec writes
itself (an observation, a decision, a restoration, a failure not by the workflow) is refused
before it is sent, as auditrec would refuse it (403); auditrec validates everything else and
answers 422 naming each problem (:class:`~auditrec_client.errors.InvalidEvents`). The field
names mirror auditrec's event models (a test keeps them equal); the vocabularies, the schema
versions and the audit-id pattern come from its published schemas
(:mod:`auditrec_client.vocabulary`, generated).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, ClassVar, Final

from auditrec_client.vocabulary import (
    AUDIT_ID_PATTERN,
    AUDIT_ID_RULE,
    ERROR_CODES,
    FAILED_BY,
    PUBLISHED_TYPES,
    SCHEMA_VERSIONS,
    ErrorCode,
    FailedBy,
)

__all__ = [
    "ERROR_CODES",
    "FAILED_BY",
    "AuditCompleted",
    "AuditFailed",
    "AuditProgressed",
    "AuditStarted",
    "ErrorCode",
    "Event",
    "FailedBy",
    "WorkflowInstanceAttached",
    "envelope_of",
]

AUDIT_ID: Final = re.compile(AUDIT_ID_PATTERN)
_WORKFLOW: Final = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # a Cloudflare workflow's name

_ENVELOPE: Final = frozenset(
    {"audit_id", "event_id", "occurred_at", "producer", "causation_id", "correlation_id"}
)


def _now() -> datetime:
    return datetime.now(UTC)


def _new_id() -> str:
    return str(uuid.uuid4())


@dataclass(frozen=True, kw_only=True)
class Event:
    """The envelope every event shares. ``event_id`` and ``occurred_at`` default to a new
    UUID and the current time, fixed here; ``producer`` defaults to the client's."""

    TYPE: ClassVar[str]
    SCHEMA_VERSION: ClassVar[int]  # the type's current one, as published

    audit_id: str
    event_id: str = field(default_factory=_new_id)
    occurred_at: datetime = field(default_factory=_now)
    producer: str | None = None
    causation_id: str | None = None
    correlation_id: str | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.SCHEMA_VERSION = SCHEMA_VERSIONS[cls.TYPE]

    def __post_init__(self) -> None:
        if not isinstance(self.audit_id, str) or not AUDIT_ID.match(self.audit_id):
            raise ValueError(f"audit_id: {self.audit_id!r} {AUDIT_ID_RULE}")
        for name in ("event_id", "causation_id", "correlation_id"):
            value = getattr(self, name)
            if value is None and name != "event_id":
                continue
            try:
                object.__setattr__(self, name, str(uuid.UUID(str(value))))
            except ValueError:
                raise ValueError(f"{name}: {value!r} is not a UUID") from None
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, datetime) and value.utcoffset() is None:
                raise ValueError(f"{f.name}: {value.isoformat()} has no UTC offset")
            if isinstance(value, int) and not isinstance(value, bool) and value < 0:
                raise ValueError(f"{f.name}: {value} must not be negative")

    def data(self) -> dict[str, Any]:
        """The ``data`` object: every field set on this event but the envelope's."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _ENVELOPE or value is None:
                continue
            out[f.name] = value.isoformat() if isinstance(value, datetime) else value
        return out

    def envelope(self, producer: str | None = None) -> dict[str, Any]:
        """The JSON envelope ``POST /events`` takes (``producer`` when the event has none)."""
        body: dict[str, Any] = {
            "event_id": self.event_id,
            "type": self.TYPE,
            "schema_version": self.SCHEMA_VERSION,
            "audit_id": self.audit_id,
            "occurred_at": self.occurred_at.isoformat(),
            "data": self.data(),
        }
        if self.producer or producer:
            body["producer"] = self.producer or producer
        if self.causation_id is not None:
            body["causation_id"] = self.causation_id
        if self.correlation_id is not None:
            body["correlation_id"] = self.correlation_id
        return body


@dataclass(frozen=True, kw_only=True)
class AuditStarted(Event):
    """An audit began (``started_at`` defaults to ``occurred_at`` on the server)."""

    TYPE: ClassVar[str] = "AuditStarted"

    project_id: str
    organization_id: str | None = None
    started_by_user_id: str | None = None
    start_url: str | None = None
    workflow_instance_id: str | None = None
    started_at: datetime | None = None
    current_phase: str | None = None
    pages_total: int | None = None
    workflow: str | None = None
    """The Cloudflare workflow the audit runs in (default: auditrec's
    ``AUDITREC_CLOUDFLARE_WORKFLOW``)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.project_id:
            raise ValueError("project_id: must not be empty")
        if self.workflow is not None and not _WORKFLOW.match(self.workflow):
            raise ValueError(
                f"workflow: {self.workflow!r} is not a workflow's name (1-64 of A-Za-z0-9_-)"
            )


@dataclass(frozen=True, kw_only=True)
class WorkflowInstanceAttached(Event):
    """The audit's Cloudflare Workflow instance is known (what auditrec probes)."""

    TYPE: ClassVar[str] = "WorkflowInstanceAttached"

    workflow_instance_id: str

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.workflow_instance_id:
            raise ValueError("workflow_instance_id: must not be empty")


@dataclass(frozen=True, kw_only=True)
class AuditProgressed(Event):
    TYPE: ClassVar[str] = "AuditProgressed"

    current_phase: str | None = None
    pages_crawled: int | None = None
    pages_total: int | None = None


@dataclass(frozen=True, kw_only=True)
class AuditCompleted(Event):
    TYPE: ClassVar[str] = "AuditCompleted"

    pages_crawled: int | None = None
    pages_total: int | None = None
    completed_at: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class AuditFailed(Event):
    """The audit failed, as its workflow saw it (``failed_by="workflow"``, the only failure a
    publisher reports: a reconciler's or an operator's is auditrec's to write).
    ``error_detail`` is kept to 500 characters."""

    TYPE: ClassVar[str] = "AuditFailed"

    error_code: ErrorCode
    error_detail: str
    failed_by: FailedBy = "workflow"
    failed_phase: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.error_code not in ERROR_CODES:
            raise ValueError(
                f"error_code: {self.error_code!r} is not one of {', '.join(ERROR_CODES)}"
            )
        if self.failed_by not in FAILED_BY:
            raise ValueError(
                f"failed_by: {self.failed_by!r} must be one of {', '.join(FAILED_BY)} "
                "(a reconciler's or an operator's failure is auditrec's to write)"
            )
        if len(self.error_detail) > 500:
            raise ValueError("error_detail: longer than 500 characters")


def envelope_of(event: Event | Mapping[str, Any], producer: str | None) -> dict[str, Any]:
    """The envelope of a builder, or of a raw mapping given an ``event_id`` now if it has none
    (so that every attempt to publish it carries the same id)."""
    if isinstance(event, Event):
        return event.envelope(producer)
    if not isinstance(event, Mapping):
        raise TypeError(f"cannot publish {type(event).__name__}: pass an Event or a mapping")
    body = dict(event)
    kind, data = body.get("type"), body.get("data")
    if kind not in PUBLISHED_TYPES:
        raise ValueError(
            f"type: {kind!r} is written by auditrec only; publishers send "
            f"{', '.join(PUBLISHED_TYPES)}"
        )
    failed_by = data.get("failed_by") if isinstance(data, Mapping) else None
    if kind == "AuditFailed" and failed_by is not None and failed_by not in FAILED_BY:
        raise ValueError(
            f"data.failed_by: {failed_by!r} is auditrec's to write; publishers send "
            f"{', '.join(FAILED_BY)}"
        )
    if body.get("event_id") is None:
        body["event_id"] = _new_id()
    if producer is not None and body.get("producer") is None:
        body["producer"] = producer
    return body
