"""The Workflows simulator's JSON formats: a seed document and the control API's bodies
(an instance, a fault, the config), validated with pydantic (unknown fields are refused); and
the names they share with the state: the default workflow, fault kinds and error values.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

__all__ = [
    "DEFAULT_WORKFLOW",
    "ConfigBody",
    "ErrorValue",
    "FaultBody",
    "FaultKind",
    "InstanceBody",
    "Seed",
]

DEFAULT_WORKFLOW = "site-audit"
FaultKind = Literal[
    "latency", "rate_limit", "server_error", "success_false", "forbidden", "malformed",
    "custom", "none",
]  # fmt: skip
ErrorValue = dict[str, str | None] | str | None


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InstanceBody(_Body):
    status: str = Field(min_length=1, max_length=64)
    error: ErrorValue = None
    start: AwareDatetime | None = None
    end: AwareDatetime | None = None
    queued: AwareDatetime | None = None
    output: Any = None
    params: dict[str, Any] | None = None


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


class Seed(_Body):
    workflows: list[str] = []
    latency_ms: float | None = Field(default=None, ge=0)
    listing: bool | None = None
    instances: list[_SeedInstance] = []
    faults: list[_SeedFault] = []
