"""The event contract: an envelope and one frozen pydantic model per event type.

Every event travels in the same envelope::

    {"event_id": "uuid", "type": "AuditStarted", "schema_version": 1,
     "audit_id": "a-123", "occurred_at": "2026-11-30T08:00:00Z",
     "producer": "crawler", "causation_id": null, "correlation_id": null,
     "data": {...}}

``type`` is the discriminator: :data:`EVENT_ADAPTER` decodes any lifecycle event,
:data:`PROBE_ADAPTER` decodes a ``ProbeRequested``. Unknown fields are invalid, timestamps
must carry an offset, and ``audit_id`` is 1-128 characters of ``[A-Za-z0-9._:-]``.

Old schema versions are upcast on read before validation
(:func:`statemachine.upcasting.upcast`), so the models always describe the current version.
"""

from __future__ import annotations

import uuid
from enum import StrEnum
from typing import Annotated, Literal, TypeAlias

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
)

from statemachine.values import (
    AuditId,
    Detail,
    Id,
    InstanceId,
    Label,
    Name,
    NonNegative,
    Phase,
    Policy,
    Producer,
    ShortText,
    Tag,
    Timestamp,
    Url,
)
from statemachine.vocabulary import ErrorCode, FailureRule, ListedAliveStatus, ObservedStatus

__all__ = [
    "EVENT_ADAPTER",
    "EVENT_TYPES",
    "LIFECYCLE_TYPES",
    "PROBE_ADAPTER",
    "AuditCompleted",
    "AuditEvent",
    "AuditFailed",
    "AuditFailureDiscarded",
    "AuditFailureHeld",
    "AuditFailureReleased",
    "AuditFailureSimulated",
    "AuditId",
    "AuditProgressed",
    "AuditRestored",
    "AuditStarted",
    "FailedBy",
    "HeldRelease",
    "Listed",
    "ProbeFailureReason",
    "ProbeRequested",
    "ReconciledBy",
    "Trigger",
    "WorkflowInstanceAttached",
    "WorkflowProbeFailed",
    "WorkflowStatusObserved",
    "derived_id",
]


class Trigger(StrEnum):
    """What asked for a probe."""

    WATCHDOG = "watchdog"
    ON_DEMAND = "on_demand"
    MANUAL = "manual"


class FailedBy(StrEnum):
    WORKFLOW = "workflow"
    RECONCILER = "reconciler"
    OPERATOR = "operator"


class ReconciledBy(StrEnum):
    WATCHDOG = "watchdog"
    ON_DEMAND = "on_demand"


class ProbeFailureReason(StrEnum):
    TIMEOUT = "timeout"
    NETWORK = "network"
    RATE_LIMITED = "rate_limited"
    UNAUTHORIZED = "unauthorized"
    SERVER_ERROR = "server_error"
    WORKFLOW_NOT_FOUND = "workflow_not_found"
    INVALID_RESPONSE = "invalid_response"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class WorkflowError(_Frozen):
    name: ShortText | None = None
    message: ShortText | None = None


# --- data payloads --------------------------------------------------------------------


class AuditStartedData(_Frozen):
    project_id: Id
    organization_id: Name | None = None
    started_by_user_id: Name | None = None
    start_url: Url | None = None
    workflow_instance_id: InstanceId | None = None
    started_at: Timestamp | None = None
    current_phase: Phase | None = None
    pages_total: NonNegative | None = None


class WorkflowInstanceAttachedData(_Frozen):
    workflow_instance_id: InstanceId


class AuditProgressedData(_Frozen):
    current_phase: Phase | None = None
    pages_crawled: NonNegative | None = None
    pages_total: NonNegative | None = None


class AuditCompletedData(_Frozen):
    pages_crawled: NonNegative | None = None
    pages_total: NonNegative | None = None
    completed_at: Timestamp | None = None


class AuditFailedData(_Frozen):
    error_code: ErrorCode
    error_detail: Detail
    failed_phase: Phase | None = None
    failed_by: FailedBy
    reconciled_by: ReconciledBy | None = None
    workflow_status: Label | None = None
    policy: Policy | None = None
    # The rule that fired, for a reconciler decision (DESIGN §4); `policy` holds its thresholds.
    rule: FailureRule | None = None
    # Who failed it, for an operator's failure (an API token's name, `cli:<os user>`).
    actor: Name | None = None


class WorkflowStatusObservedData(_Frozen):
    workflow_instance_id: InstanceId | None = None
    status: ObservedStatus
    error: WorkflowError | ShortText | None = None
    workflow_ended_at: Timestamp | None = None
    trigger: Trigger
    observed_at: Timestamp
    # The watchdog tick that asked, and how many audits it asked about (the brake's scope).
    sweep_id: Tag | None = None
    sweep_size: NonNegative | None = None
    # Where the status was read: the instance itself, or the workflow's instance listing (no
    # error payload; never a reason to fail an audit).
    source: Literal["instance", "listing"] = "instance"
    actor: Name | None = None  # who asked, for an operator's (manual) probe


class WorkflowProbeFailedData(_Frozen):
    workflow_instance_id: InstanceId | None = None
    reason: ProbeFailureReason
    http_status: Annotated[int, Field(ge=100, le=599)] | None = None
    detail: ShortText
    trigger: Trigger
    observed_at: Timestamp
    sweep_id: Tag | None = None
    sweep_size: NonNegative | None = None
    actor: Name | None = None  # who asked, for an operator's (manual) probe


class Listed(_Frozen):
    """What the workflow's instance listing said about the instance when a tick read it."""

    status: ListedAliveStatus
    at: Timestamp


class ProbeRequestedData(_Frozen):
    workflow_instance_id: InstanceId | None = None
    trigger: Trigger
    sweep_id: Tag | None = None
    # How many audits the sweep asked about; observations carry it to the reconciler.
    sweep_size: NonNegative | None = None
    # The requester's bound: a request may wait (e.g. out a 429 pause) until then, no longer.
    answer_by: Timestamp | None = None
    # The instance was listed alive: the probe records that without asking for it alone.
    listed: Listed | None = None
    actor: Name | None = None  # who asked, for an operator's (manual) probe


class AuditFailureHeldData(_Frozen):
    """A reconciler decision held by the mass-failure brake: the ``AuditFailed`` data it would
    have carried, and why it is held."""

    decision: AuditFailedData
    sweep_id: Tag | None = None
    reason: ShortText


class HeldRelease(_Frozen):
    """What ends a hold: its id (the ``AuditFailureHeld`` event's), who, and why."""

    held_id: uuid.UUID
    actor: Name
    reason: ShortText | None = None


class AuditRestoredData(_Frozen):
    """An operator undoing a failure (``failure_id``, by the reconciler or an operator): the
    audit runs again. ``resume`` (and ``pages_crawled``) are the facts a running audit is
    judged and reported on, for consumers that keep no state of failed audits."""

    reason: ShortText
    actor: Name
    failure_id: uuid.UUID
    failed_by: FailedBy
    error_code: ErrorCode
    resume: AuditStartedData
    pages_crawled: NonNegative | None = None


# --- envelopes --------------------------------------------------------------------------


class _Envelope(_Frozen):
    event_id: uuid.UUID
    schema_version: Annotated[int, Field(ge=1, le=1000)] = 1
    audit_id: AuditId
    occurred_at: Timestamp
    producer: Producer
    causation_id: uuid.UUID | None = None
    correlation_id: uuid.UUID | None = None


class AuditStarted(_Envelope):
    type: Literal["AuditStarted"] = "AuditStarted"
    data: AuditStartedData


class WorkflowInstanceAttached(_Envelope):
    type: Literal["WorkflowInstanceAttached"] = "WorkflowInstanceAttached"
    data: WorkflowInstanceAttachedData


class AuditProgressed(_Envelope):
    type: Literal["AuditProgressed"] = "AuditProgressed"
    data: AuditProgressedData


class AuditCompleted(_Envelope):
    type: Literal["AuditCompleted"] = "AuditCompleted"
    data: AuditCompletedData = AuditCompletedData()


class AuditFailed(_Envelope):
    type: Literal["AuditFailed"] = "AuditFailed"
    schema_version: Annotated[int, Field(ge=1, le=1000)] = 2
    data: AuditFailedData


class AuditFailureSimulated(_Envelope):
    """Shadow mode: the ``AuditFailed`` the reconciler would have emitted. History only."""

    type: Literal["AuditFailureSimulated"] = "AuditFailureSimulated"
    schema_version: Annotated[int, Field(ge=1, le=1000)] = 2
    data: AuditFailedData


class AuditFailureHeld(_Envelope):
    """The reconciler's decision held by the mass-failure brake: recorded, status unchanged."""

    type: Literal["AuditFailureHeld"] = "AuditFailureHeld"
    data: AuditFailureHeldData


class AuditFailureReleased(_Envelope):
    """A held decision let through (by the sweep's verdict or an operator): the reconciler
    then appends the ``AuditFailed`` it held."""

    type: Literal["AuditFailureReleased"] = "AuditFailureReleased"
    data: HeldRelease


class AuditFailureDiscarded(_Envelope):
    """A held decision dropped by an operator: the audit keeps running and is probed again."""

    type: Literal["AuditFailureDiscarded"] = "AuditFailureDiscarded"
    data: HeldRelease


class AuditRestored(_Envelope):
    """A failure undone by an operator: failed → running (never a workflow's failure)."""

    type: Literal["AuditRestored"] = "AuditRestored"
    data: AuditRestoredData


class WorkflowStatusObserved(_Envelope):
    type: Literal["WorkflowStatusObserved"] = "WorkflowStatusObserved"
    data: WorkflowStatusObservedData


class WorkflowProbeFailed(_Envelope):
    type: Literal["WorkflowProbeFailed"] = "WorkflowProbeFailed"
    data: WorkflowProbeFailedData


class ProbeRequested(_Envelope):
    """Lives on the probe-requests topic, not in the lifecycle log."""

    type: Literal["ProbeRequested"] = "ProbeRequested"
    data: ProbeRequestedData


AuditEvent: TypeAlias = Annotated[
    AuditStarted
    | WorkflowInstanceAttached
    | AuditProgressed
    | AuditCompleted
    | AuditFailed
    | AuditFailureSimulated
    | AuditFailureHeld
    | AuditFailureReleased
    | AuditFailureDiscarded
    | AuditRestored
    | WorkflowStatusObserved
    | WorkflowProbeFailed,
    Field(discriminator="type"),
]

EVENT_ADAPTER: TypeAdapter[AuditEvent] = TypeAdapter(AuditEvent)
PROBE_ADAPTER: TypeAdapter[ProbeRequested] = TypeAdapter(ProbeRequested)

LIFECYCLE_TYPES: dict[str, type[_Envelope]] = {
    cls.model_fields["type"].default: cls
    for cls in (
        AuditStarted,
        WorkflowInstanceAttached,
        AuditProgressed,
        AuditCompleted,
        AuditFailed,
        AuditFailureSimulated,
        AuditFailureHeld,
        AuditFailureReleased,
        AuditFailureDiscarded,
        AuditRestored,
        WorkflowStatusObserved,
        WorkflowProbeFailed,
    )
}
EVENT_TYPES: dict[str, type[_Envelope]] = {**LIFECYCLE_TYPES, "ProbeRequested": ProbeRequested}

_NAMESPACE = uuid.UUID("6f1c1b0e-4f4a-5d55-9a43-2f0e7c0d1a7e")


def derived_id(cause: uuid.UUID | str, role: str) -> uuid.UUID:
    """The id of an event derived from ``cause``: the same cause and role give the same id."""
    return uuid.uuid5(_NAMESPACE, f"{cause}:{role}")
