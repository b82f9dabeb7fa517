"""The event contract: an envelope and one frozen pydantic model per event type (the payloads
they carry are defined in :mod:`statemachine.payloads` and re-exported here).

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
from typing import Annotated, Literal, TypeAlias

from pydantic import Field, TypeAdapter

from statemachine.payloads import (  # re-exported: this module is the contract's one import
    AuditCompletedData,
    AuditFailedData,
    AuditFailureHeldData,
    AuditProgressedData,
    AuditRestoredData,
    AuditStartedData,
    FailedBy,
    HeldRelease,
    Listed,
    Notice,
    ProbeFailureReason,
    ProbeRequestedData,
    Progress,
    ReconciledBy,
    StepEvidence,
    TerminationRequestedData,
    Trigger,
    WorkflowError,
    WorkflowInstanceAttachedData,
    WorkflowProbeFailedData,
    WorkflowStatusObservedData,
    _Frozen,
)
from statemachine.values import AuditId, Producer, Timestamp

__all__ = [
    "EVENT_ADAPTER",
    "EVENT_TYPES",
    "LIFECYCLE_TYPES",
    "PROBE_ADAPTER",
    "AuditCompleted",
    "AuditCompletedData",
    "AuditEvent",
    "AuditFailed",
    "AuditFailedData",
    "AuditFailureDiscarded",
    "AuditFailureHeld",
    "AuditFailureHeldData",
    "AuditFailureReleased",
    "AuditFailureSimulated",
    "AuditId",
    "AuditProgressed",
    "AuditProgressedData",
    "AuditRestored",
    "AuditRestoredData",
    "AuditStarted",
    "AuditStartedData",
    "FailedBy",
    "HeldRelease",
    "Listed",
    "Notice",
    "ProbeFailureReason",
    "ProbeRequested",
    "ProbeRequestedData",
    "Progress",
    "ReconciledBy",
    "StepEvidence",
    "TerminationRequestedData",
    "Trigger",
    "WorkflowError",
    "WorkflowInstanceAttached",
    "WorkflowInstanceAttachedData",
    "WorkflowProbeFailed",
    "WorkflowProbeFailedData",
    "WorkflowStatusObserved",
    "WorkflowStatusObservedData",
    "WorkflowTerminationRequested",
    "derived_id",
]


# --- envelopes --------------------------------------------------------------------------


class _Envelope(_Frozen):
    event_id: uuid.UUID
    """The event's id (a UUID), unique within its audit: `(audit_id, event_id)` is the event's
    idempotency key. The same key with the same `type` and `data` is applied once (a redelivered
    or retried event keeps its id); with another `type` or `data` it is a conflict, refused."""
    schema_version: Annotated[int, Field(ge=1, le=1000)] = 1
    """The version of this event type's schema the event follows; older versions are upcast on
    read."""
    audit_id: AuditId
    """The audit the event is about: 1-128 characters of `[A-Za-z0-9._:-]`. The log's key."""
    occurred_at: Timestamp
    """When the event happened (RFC 3339 with an offset; naive times are invalid)."""
    producer: Producer
    """The service or component that produced the event."""
    causation_id: uuid.UUID | None = None
    """The id of the event that caused this one (a probe request for an observation, an observation
    for a decision)."""
    correlation_id: uuid.UUID | None = None
    """An id shared by events of one flow, free for producers to set."""


class AuditStarted(_Envelope):
    """An audit began: the only event that creates an audit (a second one is recorded, not
    applied)."""

    type: Literal["AuditStarted"] = "AuditStarted"
    schema_version: Annotated[int, Field(ge=1, le=1000)] = 2
    """Version 2 may name the audit's workflow (`workflow`); version 1 (none) means the
    default workflow, `AUDITREC_CLOUDFLARE_WORKFLOW`."""
    data: AuditStartedData


class WorkflowInstanceAttached(_Envelope):
    """The Workflows instance that runs the audit became known."""

    type: Literal["WorkflowInstanceAttached"] = "WorkflowInstanceAttached"
    data: WorkflowInstanceAttachedData


class AuditProgressed(_Envelope):
    """The audit moved on: its phase or page counts (ignored once the audit has ended)."""

    type: Literal["AuditProgressed"] = "AuditProgressed"
    data: AuditProgressedData


class AuditCompleted(_Envelope):
    """The audit finished; overturns a failure decided by the reconciler."""

    type: Literal["AuditCompleted"] = "AuditCompleted"
    data: AuditCompletedData = AuditCompletedData()


class AuditFailed(_Envelope):
    """The audit failed: reported by its workflow or an operator, or decided by the reconciler."""

    type: Literal["AuditFailed"] = "AuditFailed"
    schema_version: Annotated[int, Field(ge=1, le=1000)] = 2
    """Version 2 names the rule behind a reconciler decision (`rule`); version 1 is upcast."""
    data: AuditFailedData


class AuditFailureSimulated(_Envelope):
    """Shadow mode: the ``AuditFailed`` the reconciler would have emitted. History only."""

    type: Literal["AuditFailureSimulated"] = "AuditFailureSimulated"
    schema_version: Annotated[int, Field(ge=1, le=1000)] = 2
    """Version 2 names the rule behind a reconciler decision (`rule`); version 1 is upcast."""
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


class WorkflowTerminationRequested(_Envelope):
    """A stalled audit's instance is to be terminated (``AUDITREC_STALLED_ACTION=terminate``):
    the reconciler's verdict, recorded before the probe terminates it; the audit fails
    ``stalled`` once the termination is observed."""

    type: Literal["WorkflowTerminationRequested"] = "WorkflowTerminationRequested"
    data: TerminationRequestedData


class WorkflowStatusObserved(_Envelope):
    """What the probe read about an audit's workflow instance; the reconciler judges it."""

    type: Literal["WorkflowStatusObserved"] = "WorkflowStatusObserved"
    data: WorkflowStatusObservedData


class WorkflowProbeFailed(_Envelope):
    """The probe got no usable answer from the Workflows API; never changes an audit."""

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
    | WorkflowTerminationRequested
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
        WorkflowTerminationRequested,
        WorkflowStatusObserved,
        WorkflowProbeFailed,
    )
}
EVENT_TYPES: dict[str, type[_Envelope]] = {**LIFECYCLE_TYPES, "ProbeRequested": ProbeRequested}

_NAMESPACE = uuid.UUID("6f1c1b0e-4f4a-5d55-9a43-2f0e7c0d1a7e")


def derived_id(cause: uuid.UUID | str, role: str) -> uuid.UUID:
    """The id of an event derived from ``cause``: the same cause and role give the same id."""
    return uuid.uuid5(_NAMESPACE, f"{cause}:{role}")
