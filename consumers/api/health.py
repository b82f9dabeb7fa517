"""Liveness, readiness and metrics: ``/healthz`` and ``/metrics`` are public (probes and
scrapers); ``/readyz`` checks the event log, the database, and the Workflows API with one cheap
authenticated call (reused for a minute): a wrong token, account, workflow or URL makes it 503
naming the setting to fix. Its warnings (still ready): the mass-failure brake engaged, running
audits unobserved for half of ``AUDITREC_CLOUDFLARE_RETENTION``, the components' own."""

# No `from __future__ import annotations`: FastAPI evaluates the endpoints' annotations.

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from consumers.api.errors import safe
from consumers.api.models import Health, Readiness
from consumers.operations.backends import Backends
from consumers.runtime.metrics import BRAKE_ENGAGED, REGISTRY
from consumers.workflows.answers import BLINDING, PROBABLE_CAUSE
from statemachine.policy import format_duration

__all__ = ["add_health_routes", "duration_text"]

READY_TIMEOUT = 3.0
WORKFLOWS_CHECK_EVERY = 60.0  # seconds a Workflows API answer is reused by /readyz


def duration_text(span: timedelta) -> str:
    """A setting's duration as one would write it: ``7d``, ``36h``, ``90m``."""
    seconds = int(span.total_seconds())
    if seconds and seconds % 86400 == 0:
        return f"{seconds // 86400}d"
    return format_duration(span)


class _WorkflowsCheck:
    """The Workflows API's answer to one cheap authenticated call, reused for a minute."""

    def __init__(self, backends: Backends) -> None:
        self.backends = backends
        self._at = -WORKFLOWS_CHECK_EVERY
        self._answer: tuple[str, bool] = ("unchecked", True)
        self._lock = asyncio.Lock()

    async def __call__(self) -> tuple[str, bool]:
        """The check's text and whether the process can be ready with it."""
        async with self._lock:
            if time.monotonic() - self._at < WORKFLOWS_CHECK_EVERY:
                return self._answer
            try:
                client = await self.backends.client()
                failure = await asyncio.wait_for(client.check(), READY_TIMEOUT)
            except TimeoutError:
                self._answer = (f"degraded: no answer within {READY_TIMEOUT:g}s", True)
            except Exception as exc:  # our own trouble (still starting): not the API's answer
                return (f"error: {safe(exc)}", False)
            else:
                if failure is None:
                    self._answer = ("ok", True)
                elif failure.reason in BLINDING:
                    cause = PROBABLE_CAUSE[failure.reason]
                    self._answer = (f"error: {failure.reason.value} ({cause})", False)
                else:
                    self._answer = (f"degraded: {failure.reason.value}", True)
            self._at = time.monotonic()
            return self._answer


def add_health_routes(public: APIRouter, private: APIRouter, backends: Backends) -> None:
    """``/readyz`` is behind the token unless ``AUDITREC_API_PUBLIC_READYZ`` (Kubernetes probes
    send no token)."""
    workflows_api = _WorkflowsCheck(backends)
    readiness_router = public if backends.settings.api_public_readyz else private

    @public.get("/healthz", response_model=Health, summary="The process is alive")
    async def healthz() -> Health:
        return Health()

    @readiness_router.get(
        "/readyz",
        tags=["operations"],
        response_model=Readiness,
        summary="The event log, the database and the Workflows API answer",
        responses={503: {"model": Readiness, "description": "A dependency is unreachable."}},
    )
    async def readyz() -> JSONResponse:
        async def brake_warnings() -> list[str]:
            try:
                state = await asyncio.wait_for(backends.store.brake.state(), READY_TIMEOUT)
            except Exception:  # the database check says what is wrong
                return []
            BRAKE_ENGAGED.set(1 if state.engaged else 0)
            if not state.engaged:
                return []
            return [
                f"mass-failure brake engaged since {state.since:%Y-%m-%dT%H:%M:%SZ} by sweep "
                f"{state.sweep_id} ({state.lost} of {state.observations} observations "
                "instance_lost): instance_lost failures are held; `auditrec brake release` "
                "or `auditrec brake discard`"
            ]

        async def retention_warnings() -> list[str]:
            retention = backends.settings.cloudflare_retention
            unseen_since = backends.now() - retention / 2
            try:
                at_risk = await asyncio.wait_for(
                    backends.store.audits.count_retention_at_risk(unseen_since), READY_TIMEOUT
                )
            except Exception:  # the database check says what is wrong
                return []
            if not at_risk:
                return []
            audits = "audit may have" if at_risk == 1 else "audits may have"
            return [
                f"{at_risk} running {audits} lost their instance's error to retention "
                f"(AUDITREC_CLOUDFLARE_RETENTION={duration_text(retention)}): not observed "
                "for half of it; probe them (`auditrec sweep`, `auditrec status`) before "
                "Cloudflare deletes what ended"
            ]

        async def check(probe: Callable[[], Awaitable[None]]) -> str:
            try:
                await asyncio.wait_for(probe(), READY_TIMEOUT)
            except TimeoutError:
                return f"error: no answer within {READY_TIMEOUT:g}s"
            except Exception as exc:
                return f"error: {safe(exc)}"
            return "ok"

        event_log, database, (workflows, usable), warnings, retained = await asyncio.gather(
            check(backends.log.ping),
            check(backends.store.ping),
            workflows_api(),
            brake_warnings(),
            retention_warnings(),
        )
        checks = {"event_log": event_log, "database": database, "workflows_api": workflows}
        warnings = [*warnings, *retained, *backends.health.warnings()]
        troubled = backends.health.problems()
        checks.update({f"component {name}": f"error: {why}" for name, why in troubled.items()})
        ready = event_log == "ok" and database == "ok" and usable and not troubled
        body = Readiness(
            status="ready" if ready else "unavailable", checks=checks, warnings=warnings
        )
        return JSONResponse(body.model_dump(), status_code=200 if ready else 503)

    @public.get(
        "/metrics",
        summary="Prometheus metrics",
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Metrics."}},
    )
    async def metrics() -> Response:
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
