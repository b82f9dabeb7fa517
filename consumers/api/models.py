"""The HTTP API's request and response models, and the OpenAPI declarations built from them:
the error responses each route may give, and the body of ``POST /events`` (the lifecycle
event envelopes, which the endpoint validates itself); and the listing's opaque cursor.
"""

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from consumers.operations.contracts.catalog import OMITTABLE
from consumers.operations.contracts.cloudevents import BATCH, CLOUDEVENT_SCHEMA, STRUCTURED
from consumers.operations.outcomes import Outcome
from projections.row import COLUMN_KINDS, COLUMNS, ColumnKind
from statemachine.events import EVENT_ADAPTER

__all__ = [
    "EVENTS_BODY",
    "R401",
    "R403",
    "R404",
    "R422",
    "R503",
    "Accepted",
    "Audit",
    "AuditHistory",
    "AuditPage",
    "AuditStatus",
    "Health",
    "HistoryStep",
    "LogPosition",
    "Message",
    "Problems",
    "Readiness",
    "Refusal",
    "Responses",
    "SweepSummary",
    "event_input_schemas",
]

# --- response models ---------------------------------------------------------------------

Responses = dict[int | str, dict[str, Any]]


_PYTHON_OF_KIND: dict[ColumnKind, Any] = {
    "text": str,
    "integer": int,
    "timestamp": datetime,
    "boolean": bool,
    "uuid": str,
}
_REQUIRED = {"audit_id", "status", "overturned", "version"}
_DESCRIPTIONS = {
    "status": "`running`, `completed` or `failed`.",
    "version": "Events applied to this row.",
    "overturned": "A reconciler's failure was overturned by a late completion.",
    "completed_at": "When the audit completed; `null` for a failed audit (see `failed_at`).",
    "failed_at": "When the failure was recorded, while the audit is failed.",
}


def _column(name: str, kind: ColumnKind) -> tuple[Any, Any]:
    python = _PYTHON_OF_KIND[kind]
    if name in _REQUIRED:
        return python, Field(description=_DESCRIPTIONS.get(name))
    return python | None, Field(default=None, description=_DESCRIPTIONS.get(name))


# One row of the ``audits`` table (DESIGN §6), field for column.
Audit = create_model(
    "Audit",
    __doc__="One row of the ``audits`` table (DESIGN §6).",
    **{c: _column(c, COLUMN_KINDS[c]) for c in COLUMNS},  # type: ignore[call-overload]
)


class AuditStatus(Audit):
    probed: bool = Field(
        default=False,
        description="Whether this request probed the workflow; `false` with a `note` saying "
        "why not (observed recently, the status reads' share of the probe budget spent, no "
        "running `auditrec serve`, `probe=false`, not running).",
    )
    reconciliation: Outcome | None = Field(
        default=None, description="Present when this request probed the workflow."
    )
    note: str | None = Field(
        default=None, description="Why the audit was not probed, or why no outcome is given."
    )


class AuditPage(BaseModel):
    audits: list[Audit]
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next page; null on the last page."
    )
    prev_cursor: str | None = Field(
        default=None,
        description="Pass as `cursor` for the previous page; null on the first page.",
    )
    total: int | None = Field(
        default=None, description="How many audits the filters select (every page)."
    )


class LogPosition(BaseModel):
    topic: str
    partition: int
    offset: int


class HistoryStep(BaseModel):
    event_id: str
    type: str
    occurred_at: datetime
    producer: str
    causation_id: str | None = None
    before: str = Field(description="Status before the event (`none` before AuditStarted).")
    after: str = Field(description="Status after the event.")
    rule: str = Field(description="The rule or transition that fired.")
    reason: str
    data: dict[str, Any]
    position: LogPosition | None = None


class AuditHistory(BaseModel):
    audit_id: str
    status: str | None = Field(description="Current status in the projection (null: no row).")
    events: list[HistoryStep]


class Accepted(BaseModel):
    accepted: int
    event_ids: list[str]


class SweepBrake(BaseModel):
    engaged: bool
    since: str | None = Field(description="When it engaged (ISO 8601, UTC); null when released.")
    sweep_id: str | None = Field(description="The sweep that engaged it.")
    held: int = Field(description="Decisions it holds in all (from every sweep).")


class SweepSummary(BaseModel):
    sweep_id: str | None
    candidates: int
    probed: int
    failed: dict[str, int] = Field(description="Audits failed by this sweep, per error code.")
    would_fail: dict[str, int]
    healthy: int
    unchanged: int
    probe_errors: dict[str, int] = Field(description="Probes the API could not answer, by reason.")
    held: int = Field(
        default=0, description="Failures held by the mass-failure brake (still running)."
    )
    brake: SweepBrake | None = Field(
        default=None, description="The mass-failure brake when the sweep ended (not on a dry run)."
    )
    pending: int = Field(description="Outcomes that did not arrive within AUDITREC_SWEEP_WAIT.")
    skipped: bool = Field(description="Another watchdog held the lock; nothing was probed.")
    elapsed_s: float
    audits: list[Outcome]


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    status: Literal["ready", "unavailable"]
    checks: dict[str, str] = Field(description="`ok`, or what failed, per dependency.")
    warnings: list[str] = Field(
        default_factory=list,
        description="What needs an operator without making the process unready (the "
        "mass-failure brake engaged).",
    )


class HeldDecision(BaseModel):
    audit_id: str
    held_decision_id: str | None = Field(description="The AuditFailureHeld event's id.")
    held_at: str | None
    workflow_instance_id: str | None
    project_id: str | None
    started_at: str | None


class BrakeEnded(BaseModel):
    how: Literal["released", "discarded"]
    by: str | None
    at: str | None


class BrakeStatus(BaseModel):
    engaged: bool
    since: str | None = Field(description="When the brake engaged (while engaged).")
    sweep_id: str | None = Field(description="The sweep that engaged it.")
    lost: int | None = Field(description="That sweep's instance_lost decisions.")
    observations: int | None = Field(description="That sweep's observations.")
    thresholds: dict[str, float] = Field(
        description="AUDITREC_BRAKE_MIN_AUDITS and AUDITREC_BRAKE_MIN_SHARE in force."
    )
    last_ended: BrakeEnded | None
    held: int = Field(description="Running audits whose failure is held.")
    holds: list[HeldDecision] = Field(description="The oldest holds (at most 100).")


class BrakeAction(BaseModel):
    action: Literal["released", "discarded"]
    dry_run: bool
    was_engaged: bool
    holds: int = Field(description="Held decisions released or discarded (or that would be).")
    audits: list[HeldDecision]


class DeliveryEndpoint(BaseModel):
    name: str = Field(description="`webhook-<8 hex>` or `queue-<queue id>`.")
    kind: Literal["webhook", "queue"]
    target: str | None = Field(description="Where it delivers (no query); unset if not configured.")
    types: list[str] | None = Field(description="The outcome types it receives (unset: all).")
    configured: bool = Field(
        description="Configured in this process (else known by parked entries)."
    )
    parked: int


class ParkedDelivery(BaseModel):
    seq: int = Field(description="Its place among parked entries (`after` pages by it).")
    endpoint: str
    outcome_id: str
    type: str | None
    audit_id: str
    status: str | None
    decided_at: str | None
    attempts: int
    error: str = Field(description="The last failure, or what it waits behind.")
    parked_at: datetime
    retry_requested_at: datetime | None
    retry_requested_by: str | None


class Deliveries(BaseModel):
    endpoints: list[DeliveryEndpoint]
    parked: list[ParkedDelivery]
    total: int = Field(description="Entries parked (on the endpoint asked for).")
    next_after: int | None = Field(description="`after` for the next page; unset: the last.")


class DeliveryRetry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ids: list[str] | None = Field(
        default=None,
        max_length=1000,
        description="Outcome ids to retry (with their audits' others).",
    )
    all: bool = Field(default=False, description="Retry every parked entry (instead of `ids`).")
    endpoint: str | None = Field(default=None, description="Only on this endpoint.")
    dry_run: bool = Field(default=False, description="List what it would retry; do nothing.")


class DeliveryRetried(BaseModel):
    dry_run: bool
    requested: int = Field(description="Entries whose retry was asked for now.")
    entries: list[ParkedDelivery] = Field(description="The entries retried (or that would be).")


class Problems(BaseModel):
    detail: list[str] = Field(description="One line per problem, naming the item or parameter.")
    message: str | None = None


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    detail: str


class Refusal(BaseModel):
    model_config = ConfigDict(extra="allow")
    detail: str | list[str] = Field(
        description=(
            "Why: the scope a route needs, or one line per refused item or field, naming it "
            "(an event type only auditrec writes, an actor other than who authenticated)."
        )
    )
    message: str | None = None


# --- OpenAPI declarations ----------------------------------------------------------------


def event_input_schemas() -> dict[str, Any]:
    """The lifecycle event schemas as OpenAPI components, for what a publisher may send: the
    omittable envelope fields are optional, ``type`` is required."""
    schema = EVENT_ADAPTER.json_schema(ref_template="#/components/schemas/{model}")
    defs: dict[str, Any] = schema.pop("$defs")
    for name in schema["discriminator"]["mapping"]:
        envelope = defs[name]
        required = [f for f in envelope.get("required", []) if f not in OMITTABLE]
        envelope["required"] = ["type", *[f for f in required if f != "type"]]
    defs["EventEnvelope"] = schema
    defs["CloudEvent"] = CLOUDEVENT_SCHEMA
    return defs


EVENTS_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "oneOf": [
                        {"$ref": "#/components/schemas/EventEnvelope"},
                        {
                            "type": "array",
                            "minItems": 1,
                            "items": {"$ref": "#/components/schemas/EventEnvelope"},
                        },
                    ]
                },
                "example": {
                    "type": "AuditStarted",
                    "audit_id": "a-123",
                    "producer": "crawler",
                    "data": {"project_id": "p-1", "workflow_instance_id": "wf-a-123"},
                },
            },
            STRUCTURED: {"schema": {"$ref": "#/components/schemas/CloudEvent"}},
            BATCH: {
                "schema": {
                    "type": "array",
                    "minItems": 1,
                    "items": {"$ref": "#/components/schemas/CloudEvent"},
                }
            },
        },
    }
}

R401: Responses = {401: {"model": Message, "description": "Missing or invalid bearer token."}}
R403: Responses = {
    403: {
        "model": Refusal,
        "description": (
            "The token's scope does not allow this route, or the body is not the sender's to "
            "send: another actor than who authenticated, an event type only auditrec writes."
        ),
    }
}
R404: Responses = {404: {"model": Message, "description": "Unknown audit."}}
R422: Responses = {422: {"model": Problems, "description": "Invalid input; each problem is named."}}
R503: Responses = {
    503: {"model": Message, "description": "A dependency is unavailable; retry later."}
}
