"""Liveness, readiness and metrics: ``/healthz`` and ``/metrics`` are public (probes and
scrapers); ``/readyz`` checks the event log and the database."""

# No `from __future__ import annotations`: FastAPI evaluates the endpoints' annotations.

import asyncio
from collections.abc import Awaitable, Callable

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from consumers.api.errors import safe
from consumers.api.models import Health, Readiness
from consumers.operations.backends import Backends
from consumers.runtime.metrics import REGISTRY

__all__ = ["add_health_routes"]

READY_TIMEOUT = 3.0


def add_health_routes(public: APIRouter, private: APIRouter, runtime: Backends) -> None:
    @public.get("/healthz", response_model=Health, summary="The process is alive")
    async def healthz() -> Health:
        return Health()

    @private.get(
        "/readyz",
        tags=["operations"],
        response_model=Readiness,
        summary="The event log and the database are reachable",
        responses={503: {"model": Readiness, "description": "A dependency is unreachable."}},
    )
    async def readyz() -> JSONResponse:
        async def check(probe: Callable[[], Awaitable[None]]) -> str:
            try:
                await asyncio.wait_for(probe(), READY_TIMEOUT)
            except TimeoutError:
                return f"error: no answer within {READY_TIMEOUT:g}s"
            except Exception as exc:
                return f"error: {safe(exc)}"
            return "ok"

        event_log, database = await asyncio.gather(
            check(runtime.log.ping), check(runtime.store.ping)
        )
        checks = {"event_log": event_log, "database": database}
        ready = all(v == "ok" for v in checks.values())
        body = Readiness(status="ready" if ready else "unavailable", checks=checks)
        return JSONResponse(body.model_dump(), status_code=200 if ready else 503)

    @public.get(
        "/metrics",
        summary="Prometheus metrics",
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Metrics."}},
    )
    async def metrics() -> Response:
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
