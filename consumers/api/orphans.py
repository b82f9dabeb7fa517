"""Orphans over HTTP: ``GET /orphans``, ``GET /orphans/{workflow}/{instance_id}`` (its
history) and ``POST /orphans/{workflow}/{instance_id}/terminate`` (scope ``operate``), the same
as ``auditrec orphans``.

An instance id may hold ``/`` and spaces: it is the rest of the path, percent-encoded (a
``%2F`` in it is a ``/`` of the id; routing sees the decoded path, and the id runs to the final
``/terminate``). The actor is who authenticated (``token:<name>``, ``anonymous``); a body may
name the person acted for (``on_behalf_of``), and a body ``actor`` other than who
authenticated is refused (403).
"""

# No `from __future__ import annotations`: FastAPI evaluates the endpoints' annotations.

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from consumers.api.guards import actor_of, claimed_actor
from consumers.api.models import R403, R422, Message, Responses
from consumers.operations.orphans import MAX_LIMIT, MAX_SEQ
from consumers.operations.service import Operations

__all__ = ["add_orphan_routes"]

R404: Responses = {404: {"model": Message, "description": "Not an orphan auditrec knows."}}
R409: Responses = {
    409: {"model": Message, "description": "The orphan is terminated already, or gone."}
}
WorkflowPath = Annotated[str, Path(min_length=1, max_length=64, description="The workflow.")]
InstancePath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=1000,
        description="The instance id, percent-encoded (it may hold `/` and spaces).",
    ),
]


class OrphanWorkflow(BaseModel):
    name: str
    watched_since: datetime | None = Field(
        description="Since when auditrec watches it: older instances are never orphans."
    )
    configured: bool = Field(description="Watched by this deployment's settings.")
    terminable: bool = Field(description="In `AUDITREC_TERMINATE_WORKFLOWS`.")
    open: int = Field(description="Its open orphans.")


class OrphanItem(BaseModel):
    seq: int = Field(description="Its place among the orphans (`after` pages by it).")
    workflow: str
    instance_id: str
    created_on: datetime
    status: str = Field(description="The status it was last listed with.")
    first_seen: datetime
    last_seen: datetime
    state: Literal["open", "gone", "terminated"]
    terminated_at: datetime | None
    terminated_by: str | None = Field(description="Who asked for its termination (the actor).")
    on_behalf_of: str | None
    result: str | None = Field(
        description="`terminated`, `already_ended`, `not_found`, `failed: …`; unset: none yet."
    )
    terminable: bool


class OrphanList(BaseModel):
    workflows: list[OrphanWorkflow]
    orphans: list[OrphanItem]
    open: int = Field(description="Open orphans (of the workflow asked for).")
    scan_interval: float | None = Field(
        description="Seconds between orphan scans (`AUDITREC_ORPHAN_INTERVAL`); unset: off."
    )
    next_after: int | None = Field(description="`after` for the next page; unset: the last.")


class OrphanEntry(BaseModel):
    seq: int
    workflow: str
    instance_id: str
    at: datetime
    kind: str = Field(
        description=(
            "`found`, `seen` (another status), `gone`, `adopted` (an audit holds it), "
            "`terminate_asked`, `terminated`, `already_ended`, `not_found`, `failed`."
        )
    )
    actor: str | None
    on_behalf_of: str | None
    detail: str | None


class OrphanHistory(BaseModel):
    orphan: OrphanItem
    history: list[OrphanEntry]


class OrphanTerminate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    actor: str | None = Field(
        default=None,
        max_length=200,
        description="Optional, and only ever who authenticated: any other value is a 403.",
    )
    on_behalf_of: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="The person you act for; recorded as `on_behalf_of` beside the actor.",
    )
    dry_run: bool = Field(default=False, description="Say what would happen; send nothing.")


class OrphanTerminationResult(BaseModel):
    workflow: str
    instance_id: str
    created_on: datetime
    result: Literal[
        "terminated", "already_ended", "not_found", "failed", "would_terminate", "skipped"
    ]
    detail: str | None


class OrphanTerminated(BaseModel):
    dry_run: bool
    terminated: int
    results: list[OrphanTerminationResult]


def add_orphan_routes(private: APIRouter, ops: Operations) -> None:
    @private.get(
        "/orphans",
        response_model=OrphanList,
        tags=["orphans"],
        summary="Instances of the watched workflows that no audit holds",
        description=(
            "Listed alive, no audit holds them, older than `AUDITREC_INSTANCE_LOST_GRACE`, "
            "created after auditrec began watching their workflow; scanned once per "
            "`AUDITREC_ORPHAN_INTERVAL`. Oldest found first; `after` pages by `seq`; `state` "
            "`all` lists every state. An unwatched workflow is a 422."
        ),
        responses={**R422},
    )
    async def orphans(
        workflow: Annotated[str | None, Query(max_length=64)] = None,
        state: Literal["open", "gone", "terminated", "all"] = "open",
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 100,
        after: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    ) -> dict[str, Any]:
        return await ops.orphans(workflow, None if state == "all" else state, limit, after)

    @private.get(
        "/orphans/{workflow}/{instance_id:path}",
        response_model=OrphanHistory,
        tags=["orphans"],
        summary="An orphan and its history (found, gone, terminations with their actors)",
        responses={**R404, **R422},
    )
    async def orphan(workflow: WorkflowPath, instance_id: InstancePath) -> dict[str, Any]:
        return await ops.orphan(workflow, instance_id)

    @private.post(
        "/orphans/{workflow}/{instance_id:path}/terminate",
        response_model=OrphanTerminated,
        tags=["orphans"],
        summary="Terminate an orphan through the Workflows API",
        description=(
            "Only in `AUDITREC_TERMINATE_WORKFLOWS` (else 403); an orphan terminated already "
            "or gone is a 409, and nothing is sent. Just before, the table is asked again "
            "whether an audit holds the instance now (then `skipped`). The API's answer is "
            "`result`: `terminated`, `already_ended` (it had ended), `not_found`, or `failed` "
            "(the orphan stays open). Recorded with the actor and `on_behalf_of`."
        ),
        responses={**R403, **R404, **R409, **R422},
    )
    async def terminate(
        workflow: WorkflowPath,
        instance_id: InstancePath,
        request: Request,
        body: OrphanTerminate | None = None,
    ) -> dict[str, Any]:
        body = body or OrphanTerminate()
        actor = claimed_actor(actor_of(request), body.actor)
        return await ops.terminate_orphans(
            [(workflow, instance_id)],
            None,
            actor,
            body.on_behalf_of,
            dry_run=body.dry_run,
            strict=True,
        )
