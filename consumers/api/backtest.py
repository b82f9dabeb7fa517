"""Backtesting a policy over HTTP: ``GET /backtest?set=NAME=VALUE&since=…`` (the same as
``auditrec backtest --json``)."""

# No `from __future__ import annotations`: FastAPI evaluates the endpoints' annotations.

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query

from consumers.api.models import R422, R503
from consumers.operations.backtest import backtest, parse_since
from consumers.operations.service import Operations

__all__ = ["add_backtest_routes"]


def add_backtest_routes(private: APIRouter, ops: Operations) -> None:
    backends = ops.backends

    @private.get(
        "/backtest",
        tags=["operations"],
        summary="The audits that would have ended differently under other thresholds",
        description=(
            "Every recorded observation judged again under the policy in force with each "
            "`set=NAME=VALUE` applied (names as configured, e.g. `INSTANCE_LOST_GRACE=5m`); "
            "reads history, writes nothing. 422 names an unknown setting or a bad value."
        ),
        responses={**R422, **R503},
    )
    async def run_backtest(
        set_: Annotated[
            list[str], Query(alias="set", max_length=20, description="NAME=VALUE, repeatable.")
        ] = [],  # noqa: B006 - FastAPI copies defaults
        since: Annotated[
            str | None,
            Query(max_length=64, description="Only audits started since (ISO 8601, or 7d)."),
        ] = None,
    ) -> dict[str, Any]:
        start = parse_since(since, datetime.now(UTC))
        return await backtest(backends.store.audits, backends.policy, set_, since=start)
