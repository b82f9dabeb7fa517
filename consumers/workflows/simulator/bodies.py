"""The Workflows simulator's JSON formats: a seed document and the control API's bodies
(an instance, a fault, the config, a queue and its faults, an injected message, a webhook
receiver and its faults), validated with
pydantic (unknown fields are refused); the Queues API's pull and ack bodies; and the names they
share with the state: the default workflow, fault kinds and error values.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator
from standardwebhooks import Webhook

__all__ = [
    "ACCOUNT_ID",
    "DEFAULT_WORKFLOW",
    "EVENT_PREFIX",
    "EVENT_TYPES",
    "VERSION_ID",
    "AckBody",
    "ConfigBody",
    "ErrorValue",
    "FaultBody",
    "FaultKind",
    "InjectBody",
    "InstanceBody",
    "PullBody",
    "PullErrorBody",
    "QueueBody",
    "QueueFaultsBody",
    "Seed",
    "SendBatchBody",
    "SendBody",
    "StepBody",
    "WebhookBody",
    "WebhookFaultsBody",
    "iso",
]

DEFAULT_WORKFLOW = "site-audit"
VERSION_ID = "00000000-0000-4000-8000-000000000001"  # every instance's workflow version
ACCOUNT_ID = "0" * 32  # the account named in event bodies (any account id reaches the API)
FaultKind = Literal[
    "latency", "rate_limit", "server_error", "success_false", "forbidden", "malformed",
    "custom", "none",
]  # fmt: skip
ErrorValue = dict[str, str | None] | str | None
# The event types of a Workflows event subscription, by the instance status that publishes them.
EVENT_PREFIX = "cf.workflows.workflow."
EVENT_TYPES = {
    "queued": EVENT_PREFIX + "instance.queued", "running": EVENT_PREFIX + "instance.started",
    "paused": EVENT_PREFIX + "instance.paused", "errored": EVENT_PREFIX + "instance.errored",
    "terminated": EVENT_PREFIX + "instance.terminated",
    "complete": EVENT_PREFIX + "instance.completed",
}  # fmt: skip


def iso(value: datetime | None) -> str | None:
    """A time as the API writes it: ISO 8601 in UTC with milliseconds and ``Z``."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StepBody(_Body):
    """The step an instance is at (the ``step`` of an instance body): ``attempts`` so far; with
    an ``error``, every attempt but the latest failed with it. How the step and its attempts
    look in ``result.steps`` follows from the instance's status (see :mod:`.server`)."""

    name: str = Field(min_length=1, max_length=256)
    attempts: int = Field(default=1, ge=1, le=10_000)
    error: ErrorValue = None
    started_at: AwareDatetime | None = None  # default: the instance's start


class InstanceBody(_Body):
    status: str = Field(min_length=1, max_length=64)
    error: ErrorValue = None
    start: AwareDatetime | None = None
    end: AwareDatetime | None = None
    queued: AwareDatetime | None = None
    output: Any = None
    params: dict[str, Any] | None = None
    step: StepBody | None = None
    steps: list[Any] | None = None  # given as is in result.steps (instead of `step`'s)


class _SeedInstance(InstanceBody):
    workflow: str = DEFAULT_WORKFLOW
    id: str = Field(min_length=1)


class FaultBody(_Body):
    kind: FaultKind
    latency_ms: float = Field(default=0.0, ge=0)
    retry_after: float | None = Field(default=None, ge=0)
    times: int | None = Field(default=None, ge=1)
    http_status: int | None = Field(default=None, ge=100, le=599)
    headers: dict[str, str] | None = None
    body: str | None = None


class _SeedFault(FaultBody):
    id: str = Field(min_length=1)


class ConfigBody(_Body):
    latency_ms: float = Field(ge=0)
    listing: bool | None = None  # False: the instance listing answers 404 (no such route)


class PullErrorBody(_Body):
    http_status: Literal[429, 500, 502, 503]
    times: int | None = Field(default=None, ge=1)  # None: every pull
    retry_after: float | None = Field(default=None, ge=0)


class QueueFaultsBody(_Body):
    duplicate: float = Field(default=0.0, ge=0, le=1)
    drop: float = Field(default=0.0, ge=0, le=1)
    delay_ms: float = Field(default=0.0, ge=0)
    reorder: bool = False
    pull_error: PullErrorBody | None = None
    seed: int | None = None


class QueueBody(_Body):
    workflows: list[str] | None = None  # None: every workflow
    events: list[str] | None = None  # None: all six; short ("instance.errored") or full names
    max_retries: int = Field(default=3, ge=0, le=100)
    account_id: str = Field(default=ACCOUNT_ID, min_length=1)
    consumer: Literal["http_pull", "worker"] = "http_pull"  # what GET …/queues/{q} reports
    faults: QueueFaultsBody = QueueFaultsBody()

    @field_validator("events")
    @classmethod
    def _known_events(cls, events: list[str] | None) -> list[str] | None:
        if events is None:
            return None
        full = [e if e.startswith(EVENT_PREFIX) else EVENT_PREFIX + e for e in events]
        unknown = sorted(set(full) - set(EVENT_TYPES.values()))
        if unknown:
            known = sorted(EVENT_TYPES.values())
            raise ValueError(f"unknown event types {unknown}; known: {known}")
        return full


class _SeedQueue(QueueBody):
    id: str = Field(min_length=1)


class InjectBody(_Body):
    body: str
    content_type: Literal["json", "text", "bytes"] = "json"


class SendBody(BaseModel):
    """A message sent to a queue by its producer API (`POST …/queues/{id}/messages`)."""

    model_config = ConfigDict(extra="ignore")
    body: Any = None
    content_type: Literal["json", "text"] = "json"
    delay_seconds: float = Field(default=0.0, ge=0, le=43_200)

    def stored(self) -> str:
        """The body as the queue keeps it (JSON as its text)."""
        if self.content_type == "text":
            if not isinstance(self.body, str):
                raise ValueError("body: a text message's body must be a string")
            return self.body
        return json.dumps(self.body, separators=(",", ":"))


class SendBatchBody(BaseModel):
    """Messages sent at once (`POST …/queues/{id}/messages/batch`), in order."""

    model_config = ConfigDict(extra="ignore")
    messages: list[SendBody] = Field(min_length=1, max_length=100)
    delay_seconds: float = Field(default=0.0, ge=0, le=43_200)


class WebhookFaultsBody(_Body):
    """How a webhook receiver answers (`PUT /_sim/webhooks/{name}/faults`)."""

    fail: int = Field(default=0, ge=0)  # answer the next `fail` deliveries with `status`
    status: int = Field(default=500, ge=100, le=599)
    down: bool = False  # answer every delivery with `status` until set false
    delay: float = Field(default=0.0, ge=0, le=600)  # seconds before answering


class WebhookBody(WebhookFaultsBody):
    """A webhook receiver (`PUT /_sim/webhooks/{name}`): with a secret, it checks signatures."""

    secret: str | None = None

    @field_validator("secret")
    @classmethod
    def _standard_secret(cls, secret: str | None) -> str | None:
        if secret is None:
            return None
        try:
            Webhook(secret)
        except Exception as exc:  # an empty or malformed secret: the package's own errors
            raise ValueError(f"not a Standard Webhooks secret (whsec_<base64>): {exc}") from None
        return secret


class _SeedWebhook(WebhookBody):
    name: str = Field(min_length=1, pattern=r"^[^/]+$")


class _ApiBody(BaseModel):
    model_config = ConfigDict(extra="ignore")  # the API ignores what it does not know


class PullBody(_ApiBody):
    batch_size: int = Field(default=10, ge=1, le=100)
    visibility_timeout_ms: int = Field(default=30_000, ge=1, le=43_200_000)


class _Ack(_ApiBody):
    lease_id: str


class _Retry(_Ack):
    delay_seconds: float = Field(default=0, ge=0, le=86_400)


class AckBody(_ApiBody):
    acks: list[_Ack] = []
    retries: list[_Retry] = []


class Seed(_Body):
    workflows: list[str] = []
    latency_ms: float | None = Field(default=None, ge=0)
    listing: bool | None = None
    instances: list[_SeedInstance] = []
    faults: list[_SeedFault] = []
    queues: list[_SeedQueue] = []
    webhooks: list[_SeedWebhook] = []
