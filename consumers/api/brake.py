"""The mass-failure brake over HTTP: ``GET /brake``, ``POST /brake/release`` and
``POST /brake/discard`` (the same as ``auditrec brake``)."""

# No `from __future__ import annotations`: FastAPI evaluates the endpoints' annotations.

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from consumers.api.guards import actor_of
from consumers.api.models import R422, BrakeAction, BrakeStatus
from consumers.operations.service import Operations
from statemachine.values import ShortText

__all__ = ["add_brake_routes"]

_Reason = Annotated[
    ShortText | None, Query(max_length=2000, description="Why (recorded with each event).")
]
_DryRun = Annotated[bool, Query(description="List what it would touch; do nothing.")]


def add_brake_routes(private: APIRouter, ops: Operations) -> None:
    @private.get(
        "/brake",
        response_model=BrakeStatus,
        tags=["operations"],
        summary="The mass-failure brake and the failures it holds",
    )
    async def brake() -> dict[str, Any]:
        return await ops.brake_status()

    @private.post(
        "/brake/release",
        response_model=BrakeAction,
        tags=["operations"],
        summary="Let every held failure take effect, and disengage the brake",
        responses={**R422},
    )
    async def release(
        request: Request, reason: _Reason = None, dry_run: _DryRun = False
    ) -> dict[str, Any]:
        return await ops.end_brake("released", actor_of(request), reason, dry_run=dry_run)

    @private.post(
        "/brake/discard",
        response_model=BrakeAction,
        tags=["operations"],
        summary="Drop every held failure (the audits keep running), and disengage the brake",
        responses={**R422},
    )
    async def discard(
        request: Request, reason: _Reason = None, dry_run: _DryRun = False
    ) -> dict[str, Any]:
        return await ops.end_brake("discarded", actor_of(request), reason, dry_run=dry_run)
