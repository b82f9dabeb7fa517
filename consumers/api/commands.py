"""The routes that change things: ``POST /events`` (plain envelopes or CloudEvents, validated
as a whole, then published) and ``POST /sweep`` (one watchdog tick, answered with its
outcomes)."""

# No `from __future__ import annotations`: FastAPI evaluates the endpoints' annotations.

import json
from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Query, Request

from consumers.api.guards import actor_of, read_body
from consumers.api.models import (
    EVENTS_BODY,
    R403,
    R422,
    R503,
    Accepted,
    Message,
    Problems,
    SweepSummary,
)
from consumers.operations.contracts.cloudevents import (
    BATCH,
    STRUCTURED,
    is_binary,
    structured_of_binary,
    validate_cloudevents,
)
from consumers.operations.publishing import validate_items
from consumers.operations.service import Operations
from statemachine.errors import InvalidInput
from statemachine.events import AuditEvent

__all__ = ["add_command_routes"]

log = structlog.get_logger("auditrec.api")


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
        raise InvalidInput("body is not JSON", [f"body: not valid JSON ({reason})"]) from None


def _events_of(request: Request, body: bytes) -> list[AuditEvent]:
    """The validated events of a ``POST /events`` body: plain envelopes, or CloudEvents in
    structured, batch or binary mode (by ``Content-Type`` and the ``ce-*`` headers). What may
    come in at all, and naming which actor, is :func:`statemachine.admission.refusal`'s, with
    the token that authenticated (every scope alike)."""
    actor = actor_of(request)
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if is_binary(request.headers):
        return validate_cloudevents([structured_of_binary(request.headers, body)], actor=actor)
    if content_type in (STRUCTURED, BATCH):
        raw = _json(body)
        if content_type == BATCH and not isinstance(raw, list):
            raise InvalidInput("not a batch", ["body: a CloudEvents batch is a JSON array"])
        items = raw if content_type == BATCH else [raw]
        if not items:
            raise InvalidInput("empty batch", ["body: an empty batch; send at least one event"])
        return validate_cloudevents(items, actor=actor)
    raw = _json(body)
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        raise InvalidInput("empty list", ["body: an empty list; send at least one event"])
    # (an envelope that names no producer is recorded as produced by who sent it)
    return validate_items(items, actor=actor, label="item", producer=actor)


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
            "`schema_version` and `producer` may be omitted. CloudEvents 1.0 are accepted "
            "too: structured (`application/cloudevents+json`), batch "
            "(`application/cloudevents-batch+json`) and binary (`ce-*` headers, JSON data); "
            "`type` is the event type (`AuditStarted` or `dev.auditrec.AuditStarted`), "
            "`subject` the audit id, `id` the event id, `source` the producer, `time` "
            "`occurred_at`. "
            "`(audit_id, event_id)` is an idempotency key: an item that repeats an earlier "
            "one's key, `type` and `data` (whatever its `occurred_at`, `producer` or "
            "`schema_version`) is accepted and published once; one that gives a key another "
            "`type` or `data` than an earlier item or the history is refused (409, naming the "
            "event id and audit); the same `event_id` under another audit is another event. "
            "Only what other services report is accepted, whatever the token's scope: "
            "`AuditStarted`, `WorkflowInstanceAttached`, `AuditProgressed`, `AuditCompleted`, "
            "and `AuditFailed` with `failed_by: workflow`; anything auditrec writes itself "
            "(observations, decisions, holds, releases, restorations) is refused with 403 "
            "naming the item and its type, and so is an item whose `data.actor` is not who "
            "authenticated. "
            f"Bodies above {max_body} bytes are refused (413)."
        ),
        responses={
            **R403,
            409: {
                "model": Problems,
                "description": "An event id already names an event with another `type` or "
                "`data` in its audit (earlier in the body, or in the history); each is named.",
            },
            413: {"model": Message, "description": "Body too large."},
            **R422,
            **R503,
        },
        openapi_extra=EVENTS_BODY,
    )
    async def post_events(request: Request) -> Accepted:
        body = await read_body(request, max_body)
        events = _events_of(request, body)
        await ops.refuse_conflicts(events)
        ids = await ops.publish(events)
        log.info("events published", count=len(ids), actor=actor_of(request))
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
