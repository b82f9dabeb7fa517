"""The routes that change things: ``POST /events`` (validated as a whole, then published) and
``POST /sweep`` (one watchdog tick, answered with its outcomes)."""

# No `from __future__ import annotations`: FastAPI evaluates the endpoints' annotations.

import json
from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Query, Request

from consumers.api.guards import read_body
from consumers.api.models import EVENTS_BODY, R422, R503, Accepted, Message, SweepSummary
from consumers.operations.operations import Operations
from consumers.operations.publishing import validate_items
from statemachine.errors import InvalidInput

__all__ = ["add_command_routes"]

log = structlog.get_logger("auditrec.api")


def add_command_routes(private: APIRouter, ops: Operations, max_body: int) -> None:
    @private.post(
        "/events",
        status_code=202,
        response_model=Accepted,
        tags=["events"],
        summary="Publish lifecycle events (one envelope or a list)",
        description=(
            "Every item is validated before anything is published: one invalid item rejects "
            "the submission (422) with one line per problem, `item N: …` (N is the 0-based "
            "index; a single envelope is item 0). `event_id`, `occurred_at`, "
            "`schema_version` and `producer` may be omitted. "
            f"Bodies above {max_body} bytes are refused (413)."
        ),
        responses={
            413: {"model": Message, "description": "Body too large."},
            **R422,
            **R503,
        },
        openapi_extra=EVENTS_BODY,
    )
    async def post_events(request: Request) -> Accepted:
        body = await read_body(request, max_body)
        try:
            raw = json.loads(body)
        except (ValueError, RecursionError) as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
            raise InvalidInput("body is not JSON", [f"body: not valid JSON ({reason})"]) from None
        items = raw if isinstance(raw, list) else [raw]
        if not items:
            raise InvalidInput("empty list", ["body: an empty list; send at least one event"])
        events = validate_items(items, label="item", producer="auditrec-api")
        ids = await ops.publish(events)
        log.info("events published", count=len(ids))
        return Accepted(accepted=len(ids), event_ids=ids)

    @private.post(
        "/sweep",
        response_model=SweepSummary,
        tags=["operations"],
        summary="Run one watchdog tick and wait for its outcomes",
        responses={
            503: {"model": Message, "description": "No `auditrec serve` runs the pipeline."}
        },
    )
    async def sweep(
        dry_run: Annotated[
            bool, Query(description="Only list the candidates; probe nothing.")
        ] = False,
    ) -> dict[str, Any]:
        summary = (await ops.sweep(dry_run=dry_run, inline=False)).as_dict()
        for key in ("failed", "would_fail", "probe_errors"):
            summary[key] = {str(k): v for k, v in summary[key].items()}
        return summary
