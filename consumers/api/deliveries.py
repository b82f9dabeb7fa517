"""The outcome feed's parked deliveries over HTTP: ``GET /deliveries`` and
``POST /deliveries/retry`` (the same as ``auditrec deliveries``; the POST needs scope
``operate``)."""

# No `from __future__ import annotations`: FastAPI evaluates the endpoints' annotations.

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from consumers.api.guards import actor_of
from consumers.api.models import R403, R422, Deliveries, DeliveryRetried, DeliveryRetry
from consumers.operations.deliveries import MAX_LIMIT, MAX_SEQ
from consumers.operations.service import Operations
from statemachine.errors import InvalidInput

__all__ = ["add_delivery_routes"]


def add_delivery_routes(private: APIRouter, ops: Operations) -> None:
    @private.get(
        "/deliveries",
        response_model=Deliveries,
        tags=["outcomes"],
        summary="The outcome feed's endpoints and the entries parked on them",
        description=(
            "Entries not delivered within `AUDITREC_WEBHOOK_RETRY_FOR`, and the entries of "
            "their audits behind them, oldest first; `after` pages by `seq`. An unknown "
            "endpoint is a 422."
        ),
        responses={**R422},
    )
    async def deliveries(
        endpoint: Annotated[str | None, Query(max_length=100)] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 100,
        after: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    ) -> dict[str, Any]:
        return await ops.deliveries(endpoint, limit, after)

    @private.post(
        "/deliveries/retry",
        response_model=DeliveryRetried,
        tags=["outcomes"],
        summary="Deliver parked entries again (each with its audit's others, in order)",
        description=(
            "Name `ids`, or ask for `all`; `endpoint` narrows either. Each entry named brings "
            "every entry of its audit parked on that endpoint, delivered in order by the "
            "endpoint's feed within seconds; one that fails again is parked again. An id not "
            "parked (there) is a 422, and nothing is retried."
        ),
        responses={**R403, **R422},
    )
    async def retry(body: DeliveryRetry, request: Request) -> dict[str, Any]:
        if body.all == (body.ids is not None):
            raise InvalidInput(
                "name the entries to retry", ["body: give either ids or all: true (not both)"]
            )
        return await ops.retry_deliveries(
            None if body.all else body.ids,
            body.endpoint,
            actor_of(request),
            dry_run=body.dry_run,
        )
