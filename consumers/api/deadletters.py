"""Dead letters over HTTP: ``GET /dead-letters``, ``GET /dead-letters/{position}``,
``POST /dead-letters/{position}/replay`` and ``POST /dead-letters/purge`` (the same as
``auditrec dead-letters``; the POSTs need scope ``operate``)."""

# No `from __future__ import annotations`: FastAPI evaluates the endpoints' annotations.

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from consumers.api.guards import actor_of, read_body
from consumers.api.models import R403, R422, R503, Message, Problems, Responses
from consumers.operations.deadletters import (
    MAX_LIMIT,
    list_dead_letters,
    replay_dead_letter,
    show_dead_letter,
)
from consumers.operations.purging import purge_dead_letters
from consumers.operations.service import Operations
from statemachine.errors import InvalidInput
from statemachine.policy import parse_duration

__all__ = ["add_dead_letter_routes"]

_Position = Annotated[
    str,
    Path(
        pattern=r"^\d+(:\d+)?$",
        description="PARTITION:OFFSET on the dead-letter topic (as the list shows it).",
    ),
]
R404: Responses = {404: {"model": Message, "description": "No dead letter at that position."}}


class PurgeDeadLetters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    older_than: str = Field(
        min_length=1,
        max_length=32,
        description="Remove the dead letters written longer ago than this (`30d`, `12h`).",
    )
    dry_run: bool = Field(
        default=True, description="Count what it would remove (the default); `false` removes."
    )


def add_dead_letter_routes(private: APIRouter, ops: Operations, max_body: int) -> None:
    log = ops.backends.log

    @private.get(
        "/dead-letters",
        tags=["dead letters"],
        summary="Records set aside by a consumer, with the reason",
        responses={**R422, **R503},
    )
    async def dead_letters(
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 50,
        consumer: Annotated[
            str | None,
            Query(
                max_length=200,
                description="A consumer group, or a component meaning its group "
                "(`projector` for `<group prefix>-projector`).",
            ),
        ] = None,
        order: Literal["newest", "position"] = "newest",
    ) -> dict[str, Any]:
        return await list_dead_letters(log, limit=limit, consumer=consumer, order=order)

    @private.get(
        "/dead-letters/{position}",
        tags=["dead letters"],
        summary="One dead letter: the reason, the original bytes, what they decode to today",
        responses={**R404, **R422, **R503},
    )
    async def dead_letter(position: _Position) -> dict[str, Any]:
        return await show_dead_letter(log, position)

    @private.post(
        "/dead-letters/purge",
        tags=["dead letters"],
        summary="Remove the dead letters older than a duration (a dry run unless dry_run=false)",
        description=(
            "Removes the records of the dead-letter topic written more than `older_than` ago "
            "(per partition, a prefix), and records who purged what and when: a purge mark on "
            "each partition purged, a `dead letters purged` log line, and "
            "`auditrec_dead_letters_purged_total`. `older_than` out of range is a 422."
        ),
        responses={**R422, **R503},
    )
    async def purge(body: PurgeDeadLetters, request: Request) -> dict[str, Any]:
        try:
            older_than = parse_duration(body.older_than)
        except ValueError as exc:
            raise InvalidInput("invalid older_than", [f"body.older_than: {exc}"]) from None
        return await purge_dead_letters(
            log, older_than, actor=actor_of(request), dry_run=body.dry_run
        )

    @private.post(
        "/dead-letters/{position}/replay",
        tags=["dead letters"],
        summary="Publish the record to its original topic again, once it decodes",
        description=(
            "Validated with today's codec (older versions upcast); refused (422) with the "
            "reason when it still does not decode. A body, when given, is a corrected "
            "envelope published instead of the original: only what publishers may send (403 "
            "otherwise, naming the field), its `data.actor` (if any) who authenticated. An "
            "event id the history holds with another `type` or `data` is refused (409) as "
            "`POST /events` refuses it. A record of the ingest topic is judged as the ingest "
            "component judges it and goes to the lifecycle topic. Once per original record: a "
            "second replay publishes nothing (`published: false`) and says when it was "
            "replayed."
        ),
        responses={
            **R403,
            **R404,
            409: {
                "model": Problems,
                "description": "The event id already names an event with another `type` or "
                "`data` in its audit's history.",
            },
            **R422,
            **R503,
        },
    )
    async def replay(
        position: _Position,
        request: Request,
        dry_run: Annotated[bool, Query(description="Validate only; publish nothing.")] = False,
    ) -> dict[str, Any]:
        body = await read_body(request, max_body)
        return await replay_dead_letter(
            log,
            position,
            actor=actor_of(request),
            body=body or None,
            dry_run=dry_run,
            audits=ops.backends.store.audits,
        )
