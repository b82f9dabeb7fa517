"""Request and response models of the operator actions over HTTP (``POST /audits/{id}/fail``,
``…/restore``, ``…/probe``, and the bulk ``POST /audits/fail``, ``POST /audits/restore``)."""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from consumers.operations.action_input import REASON_LIMIT
from consumers.operations.listing import StatusName
from statemachine.vocabulary import ErrorCode

__all__ = [
    "ActionOutcome",
    "BulkFail",
    "BulkOutcome",
    "BulkRestore",
    "FailAudit",
    "RestoreAudit",
]

_Reason = Field(min_length=1, max_length=REASON_LIMIT, description="Why (recorded with the event).")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    actor: str | None = Field(
        default=None,
        max_length=200,
        description=(
            "Optional, and only ever who authenticated (`token:<name>`, `anonymous` on an API "
            "without tokens): any other value is refused (403) naming both."
        ),
    )
    on_behalf_of: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="The person you act for; recorded as `on_behalf_of` beside the actor.",
    )


class FailAudit(_Body):
    code: ErrorCode = Field(description="The error code the audit fails with.")
    reason: str = _Reason
    dry_run: bool = Field(default=False, description="Say what would happen; publish nothing.")


class RestoreAudit(_Body):
    reason: str = _Reason
    dry_run: bool = Field(default=False, description="Say what would happen; publish nothing.")


class _Filter(_Body):
    status: StatusName | None = None
    project_id: str | None = Field(default=None, max_length=256)
    error_code: ErrorCode | None = None
    older_than: str | None = Field(
        default=None, max_length=32, description="Started longer ago than this (`2h`, `90m`)."
    )
    dry_run: bool = Field(
        default=True, description="List what it would touch (the default); `false` acts."
    )


class BulkFail(_Filter):
    code: ErrorCode
    reason: str = _Reason


class BulkRestore(_Filter):
    reason: str = _Reason


class ActionOutcome(BaseModel):
    audit_id: str
    action: Literal["fail", "restore", "probe"]
    dry_run: bool
    before: str = Field(description="Status before the action.")
    after: str = Field(description="Status after it (or that it would have).")
    event_id: str | None = Field(description="The event published (null: dry run, probe).")
    actor: str = Field(
        description="Who acted: `token:<name>` of the API token (`anonymous` without tokens)."
    )
    on_behalf_of: str | None = Field(
        default=None, description="The person the actor acted for, when the body named one."
    )
    message: str
    outcome: dict[str, Any] | None = Field(
        default=None, description="A probe's outcome (as `reconciliation` of GET /audits/{id})."
    )


class BulkOutcome(BaseModel):
    action: Literal["fail", "restore"]
    dry_run: bool
    matched: int = Field(description="Audits the filter selected.")
    acted: int = Field(description="Audits acted on (or that would be).")
    truncated: bool = Field(description="More audits matched than one bulk action takes.")
    results: list[ActionOutcome]
    skipped: list[ActionOutcome] = Field(description="Selected, but the action does not apply.")
