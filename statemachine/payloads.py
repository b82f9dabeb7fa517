"""The payloads of the event contract: the ``data`` of each event type, and the enumerations
they share. Each is a frozen pydantic model that forbids unknown fields; a field's docstring is
its description in the published JSON Schemas. :mod:`statemachine.events` wraps them in
envelopes (and re-exports them: it is the contract's one import).
"""

from __future__ import annotations

import uuid
from enum import StrEnum
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from statemachine.values import (
    Detail,
    Id,
    InstanceId,
    Label,
    Name,
    NonNegative,
    Phase,
    Policy,
    ShortText,
    Tag,
    Timestamp,
    Url,
    WorkflowName,
)
from statemachine.vocabulary import ErrorCode, FailureRule, ListedAliveStatus, ObservedStatus

__all__ = [
    "AuditCompletedData",
    "AuditFailedData",
    "AuditFailureHeldData",
    "AuditProgressedData",
    "AuditRestoredData",
    "AuditStartedData",
    "FailedBy",
    "HeldRelease",
    "Listed",
    "Notice",
    "ProbeFailureReason",
    "ProbeRequestedData",
    "Progress",
    "ReconciledBy",
    "StepEvidence",
    "TerminationRequestedData",
    "Trigger",
    "WorkflowError",
    "WorkflowInstanceAttachedData",
    "WorkflowProbeFailedData",
    "WorkflowStatusObservedData",
]


class Trigger(StrEnum):
    """What asked for a probe."""

    WATCHDOG = "watchdog"
    ON_DEMAND = "on_demand"
    MANUAL = "manual"
    SUBSCRIPTION = "subscription"


class FailedBy(StrEnum):
    WORKFLOW = "workflow"
    RECONCILER = "reconciler"
    OPERATOR = "operator"


class ReconciledBy(StrEnum):
    WATCHDOG = "watchdog"
    ON_DEMAND = "on_demand"
    SUBSCRIPTION = "subscription"


class ProbeFailureReason(StrEnum):
    TIMEOUT = "timeout"
    NETWORK = "network"
    RATE_LIMITED = "rate_limited"
    UNAUTHORIZED = "unauthorized"
    SERVER_ERROR = "server_error"
    WORKFLOW_NOT_FOUND = "workflow_not_found"
    INVALID_RESPONSE = "invalid_response"


class _Frozen(BaseModel):
    # Field docstrings become the descriptions of the published JSON Schemas (auditrec schema).
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


# Optional fields added after a payload was first published: written only when set, so that a
# consumer of a version without them reads what this one writes (unknown fields are invalid)
# while an upgrade rolls out.
_WRITTEN_WHEN_SET: Final = ("on_behalf_of", "workflow", "progress", "step", "terminate")


class _ActedFor(_Frozen):
    """A payload that may name the person an operator acted for (``on_behalf_of``), or carry
    another field added since it was first published: such fields are written only when set
    (:data:`_WRITTEN_WHEN_SET`)."""

    @model_serializer(mode="wrap")
    def _named_only(self, handler: SerializerFunctionWrapHandler) -> Any:
        out = handler(self)
        if isinstance(out, dict):
            for name in _WRITTEN_WHEN_SET:
                if name in out and out[name] in (None, False):
                    del out[name]
        return out


class Notice(_Frozen):
    """A message of the Workflows event subscription that reported the instance's status."""

    message_id: Tag
    """The queue message's id."""
    event: Label
    """The message's event type, e.g. `cf.workflows.workflow.instance.errored`."""
    at: Timestamp
    """When the status changed (the message's `metadata.eventTimestamp`)."""


class WorkflowError(_Frozen):
    name: ShortText | None = None
    """The error's class name as the Workflows API reports it."""
    message: ShortText | None = None
    """The error's message as the Workflows API reports it."""


class Progress(_Frozen):
    """The audit's latest publisher event as auditrec recorded it: what a stall is judged by."""

    event_id: uuid.UUID
    """The latest event of the audit's publisher (`AuditStarted`, `WorkflowInstanceAttached`,
    `AuditProgressed`) or an operator's restoration."""
    recorded_at: Timestamp
    """When auditrec recorded it (never the event's own `occurred_at`)."""


class StepEvidence(_Frozen):
    """The instance's current step, as read with its steps: what a stall verdict shows."""

    name: ShortText
    """The step's name."""
    started_at: Timestamp | None = None
    """When the step (its first attempt) started."""
    attempts: NonNegative = 0
    """How many attempts the step has made."""
    retrying: bool = False
    """Whether the step is running again after a failed attempt."""
    error: WorkflowError | ShortText | None = None
    """The latest failed attempt's error."""


# --- data payloads --------------------------------------------------------------------


class AuditStartedData(_Frozen):
    project_id: Id
    """The project the audited site belongs to."""
    organization_id: Name | None = None
    """The organization that owns the project."""
    started_by_user_id: Name | None = None
    """The user who started the audit, if a user did."""
    start_url: Url | None = None
    """The URL the crawl starts from."""
    workflow_instance_id: InstanceId | None = None
    """The Cloudflare Workflows instance running the audit, when already known (else see
    `WorkflowInstanceAttached`)."""
    started_at: Timestamp | None = None
    """When the audit started (RFC 3339 with an offset); defaults to the envelope's
    `occurred_at`."""
    current_phase: Phase | None = None
    """The phase the audit starts in; defaults to `discovery`."""
    pages_total: NonNegative | None = None
    """How many pages the audit expects to crawl, when known."""
    workflow: WorkflowName | None = None
    """The Cloudflare workflow the audit runs in; defaults to `AUDITREC_CLOUDFLARE_WORKFLOW`."""

    @model_serializer(mode="wrap")
    def _named_only(self, handler: SerializerFunctionWrapHandler) -> Any:
        out = handler(self)
        if isinstance(out, dict) and out.get("workflow", "") is None:
            del out["workflow"]
        return out


class WorkflowInstanceAttachedData(_Frozen):
    workflow_instance_id: InstanceId
    """The Cloudflare Workflows instance now running the audit; later observations of another
    instance are ignored."""


class AuditProgressedData(_Frozen):
    current_phase: Phase | None = None
    """The phase the audit is in now."""
    pages_crawled: NonNegative | None = None
    """Pages crawled so far."""
    pages_total: NonNegative | None = None
    """Pages the audit now expects to crawl."""


class AuditCompletedData(_Frozen):
    pages_crawled: NonNegative | None = None
    """Pages crawled in all."""
    pages_total: NonNegative | None = None
    """Pages the audit expected to crawl."""
    completed_at: Timestamp | None = None
    """When the audit completed; defaults to the envelope's `occurred_at`."""


class AuditFailedData(_ActedFor):
    error_code: ErrorCode
    """The classified cause: one of auditrec's error codes."""
    error_detail: Detail
    """What happened, for a human (at most 500 characters)."""
    failed_phase: Phase | None = None
    """The phase the audit was in when it failed."""
    failed_by: FailedBy
    """Who decided the failure: the workflow itself, auditrec's reconciler (reserved to auditrec),
    or an operator."""
    reconciled_by: ReconciledBy | None = None
    """For a reconciler decision: what asked for the probe behind it."""
    workflow_status: Label | None = None
    """For a reconciler decision: the workflow status the decision rests on."""
    policy: Policy | None = None
    """For a reconciler decision: the thresholds in force and the evidence, so the decision
    explains itself later."""
    rule: FailureRule | None = None
    """For a reconciler decision: the rule that fired."""
    actor: Name | None = None
    """Who failed it, for an operator's failure: who authenticated, `token:<name>` (an API
    token), `anonymous` (an API without tokens) or `cli:<os user>`."""
    on_behalf_of: Name | None = None
    """The person the actor acted for, as the operator named them (`--operator NAME`, a
    body's `on_behalf_of`): recorded beside the actor, never instead of it."""


class WorkflowStatusObservedData(_ActedFor):
    workflow_instance_id: InstanceId | None = None
    """The instance that was asked about (none when the audit has no instance)."""
    status: ObservedStatus
    """What the Workflows API answered, or `not_found` / `not_attached`."""
    error: WorkflowError | ShortText | None = None
    """The instance's error payload, when it errored."""
    workflow_ended_at: Timestamp | None = None
    """When the instance ended, when it did."""
    trigger: Trigger
    """What asked for the probe."""
    observed_at: Timestamp
    """When the status was read: the clock the rules judge by."""
    sweep_id: Tag | None = None
    """The watchdog tick that asked, if one did."""
    sweep_size: NonNegative | None = None
    """How many audits that tick asked about (the mass-failure brake's scope)."""
    source: Literal["instance", "listing", "subscription"] = "instance"
    """Where the status was read: the instance itself, the workflow's instance listing, or a
    message of the event subscription (neither of the last two is ever a reason to fail)."""
    notice: Notice | None = None
    """The event subscription's message behind the observation, when one reported it."""
    actor: Name | None = None
    """Who asked, for an operator's (manual) probe: who authenticated, `token:<name>`,
    `anonymous` or `cli:<os user>`."""
    on_behalf_of: Name | None = None
    """The person the actor acted for, as the operator named them (`--operator NAME`, a
    body's `on_behalf_of`): recorded beside the actor, never instead of it."""
    workflow: WorkflowName | None = None
    """The workflow asked in, when not the default one."""
    progress: Progress | None = None
    """The audit's latest publisher event when the probe was asked for, for a stall check."""
    step: StepEvidence | None = None
    """The instance's current step, when it was read with its steps (a stall check)."""
    terminate: bool = False
    """Whether the probe terminated the instance (for a stall) before reading it."""


class WorkflowProbeFailedData(_ActedFor):
    workflow_instance_id: InstanceId | None = None
    """The instance that was asked about."""
    reason: ProbeFailureReason
    """Why the Workflows API gave no usable answer."""
    http_status: Annotated[int, Field(ge=100, le=599)] | None = None
    """The HTTP status of the answer, when there was one."""
    detail: ShortText
    """What went wrong, for a human."""
    trigger: Trigger
    """What asked for the probe."""
    observed_at: Timestamp
    """When the probe gave up."""
    sweep_id: Tag | None = None
    """The watchdog tick that asked, if one did."""
    sweep_size: NonNegative | None = None
    """How many audits that tick asked about."""
    actor: Name | None = None
    """Who asked, for an operator's (manual) probe: who authenticated, `token:<name>`,
    `anonymous` or `cli:<os user>`."""
    on_behalf_of: Name | None = None
    """The person the actor acted for, as the operator named them (`--operator NAME`, a
    body's `on_behalf_of`): recorded beside the actor, never instead of it."""


class Listed(_Frozen):
    """What the workflow's instance listing said about the instance when a tick read it."""

    status: ListedAliveStatus
    """The alive status the listing showed."""
    at: Timestamp
    """When the listing was read."""


class ProbeRequestedData(_ActedFor):
    workflow_instance_id: InstanceId | None = None
    """The instance to ask about (none: the audit has none, observed as `not_attached`)."""
    trigger: Trigger
    """What asks for the probe."""
    sweep_id: Tag | None = None
    """The watchdog tick asking, if one is."""
    sweep_size: NonNegative | None = None
    """How many audits that tick asks about."""
    answer_by: Timestamp | None = None
    """The requester's bound: the request may wait (out a 429 pause) until then, no longer."""
    listed: Listed | None = None
    """Set when the instance was listed alive: the probe records that without asking for it
    alone."""
    notice: Notice | None = None
    """For a request of the event subscription (`trigger: subscription`): the message that
    reported the instance ended, which the probe confirms with one request."""
    workflow: WorkflowName | None = None
    """The workflow the instance runs in, when not the default one."""
    progress: Progress | None = None
    """A stall check: the audit's latest publisher event as the watchdog read it; the probe
    reads the instance with its steps and records this beside what it saw."""
    terminate: bool = False
    """Terminate the instance (a stalled audit's), then read it: only ever asked by the
    reconciler, and done only in `AUDITREC_TERMINATE_WORKFLOWS`."""
    actor: Name | None = None
    """Who asked, for an operator's (manual) probe: who authenticated, `token:<name>`,
    `anonymous` or `cli:<os user>`."""
    on_behalf_of: Name | None = None
    """The person the actor acted for, as the operator named them (`--operator NAME`, a
    body's `on_behalf_of`): recorded beside the actor, never instead of it."""


class AuditFailureHeldData(_Frozen):
    """A reconciler decision held by the mass-failure brake: the ``AuditFailed`` data it would
    have carried, and why it is held."""

    decision: AuditFailedData
    """The `AuditFailed` data the reconciler would have appended."""
    sweep_id: Tag | None = None
    """The watchdog tick whose decisions the brake holds."""
    reason: ShortText
    """Why the decision is held."""


class TerminationRequestedData(_Frozen):
    """A stalled audit's instance to be terminated: the stall verdict and where to act."""

    workflow_instance_id: InstanceId
    """The instance to terminate."""
    workflow: WorkflowName
    """The workflow it runs in."""
    decision: AuditFailedData
    """The `stalled` failure the audit gets once the termination is observed, with its
    evidence."""


class HeldRelease(_Frozen):
    """What ends a hold: its id (the ``AuditFailureHeld`` event's), who, and why."""

    held_id: uuid.UUID
    """The `AuditFailureHeld` event this ends."""
    actor: Name
    """Who ended it: an operator, or the brake's own verdict."""
    reason: ShortText | None = None
    """Why, as the actor gave it."""


class AuditRestoredData(_ActedFor):
    """An operator undoing a failure (``failure_id``, by the reconciler or an operator): the
    audit runs again. ``resume`` (and ``pages_crawled``) are the facts a running audit is
    judged and reported on, for consumers that keep no state of failed audits."""

    reason: ShortText
    """Why the failure is undone, in the operator's words."""
    actor: Name
    """Who restored it: who authenticated, `token:<name>` (an API token), `anonymous` (an API
    without tokens) or `cli:<os user>`."""
    failure_id: uuid.UUID
    """The event id of the `AuditFailed` this undoes."""
    failed_by: FailedBy
    """Who made that failure: `reconciler` or `operator` (a workflow's is never restored)."""
    error_code: ErrorCode
    """The error code of the failure undone."""
    resume: AuditStartedData
    """The audit's facts as started, so a consumer without state of failed audits can judge and
    report it again."""
    pages_crawled: NonNegative | None = None
    """Pages crawled when it failed, if known."""
    on_behalf_of: Name | None = None
    """The person the actor acted for, as the operator named them (`--operator NAME`, a
    body's `on_behalf_of`): recorded beside the actor, never instead of it."""
