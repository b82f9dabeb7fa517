"""The HTTP API (DESIGN §7): status with on-demand reconciliation, listing, history, event
ingestion, sweeps, health and metrics. ``auditrec serve`` runs it (component ``api``) through
:func:`build_app` inside :class:`~consumers.api.server.ApiServer`; the backends (event log, store)
are started and stopped by the composition root.

Endpoints (OpenAPI at ``/docs``, schema at ``/openapi.json``):

- ``GET /audits/{audit_id}[?probe=false]``: the row (DESIGN §6 column names), plus
  ``reconciliation`` (what an on-demand probe found) and ``note``; 404 for an unknown audit.
- ``GET /audits?status=&limit=&cursor=``: ``{"audits": [...], "next_cursor": ...}``, newest
  first, keyset-paginated by an opaque cursor.
- ``GET /audits/{audit_id}/events``: each event with the state before → after and the rule
  that fired (``auditrec replay``).
- ``POST /events``: one envelope or a list; everything is validated before anything is
  published; 202 ``{"accepted": n, "event_ids": [...]}``; 422 ``{"detail": ["item N: …"]}``.
- ``POST /sweep[?dry_run=true]``: one watchdog tick; the summary once the outcomes are in.
- ``GET /healthz`` and ``GET /metrics``: never behind a token (liveness probes and scrapers);
  ``GET /readyz`` reports on the dependencies and is behind the token like everything else.

With ``AUDITREC_API_TOKENS`` set, every other route — ``/docs`` and ``/openapi.json``
included — needs ``Authorization: Bearer <token>`` (401 otherwise). Tokens are compared in
constant time against every configured token and never logged. Request bodies larger than
``AUDITREC_API_MAX_BODY_BYTES`` are refused with 413, by ``Content-Length`` before anything
is read, and while streaming otherwise. Every error body is ``{"detail": ...}``: a list of
problems for 422 (each naming the item, parameter or field), a sentence otherwise; driver
errors are summarised, never echoed with credentials.
"""

# No `from __future__ import annotations`: FastAPI must evaluate the endpoints' annotations,
# some of which (the token dependency) refer to names local to build_app.

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

import structlog
from fastapi import APIRouter, Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from consumers.api.guards import BodyLimit, BodyTooLarge, read_body, token_check, too_large
from consumers.api.models import (
    EVENTS_BODY,
    R401,
    R404,
    R422,
    R503,
    Accepted,
    AuditHistory,
    AuditPage,
    AuditStatus,
    Health,
    Message,
    Readiness,
    SweepSummary,
    decode_cursor,
    encode_cursor,
    event_input_schemas,
)
from consumers.operations.operations import Operations
from consumers.operations.outcomes import Outcome
from consumers.operations.publishing import validate_items
from consumers.runtime.metrics import REGISTRY
from projections.row import AuditRow, row_dict
from statemachine.errors import (
    AuditrecError,
    InfrastructureError,
    InvalidInput,
    NoServer,
    NotFound,
    StoreError,
)
from statemachine.explain import explain
from statemachine.vocabulary import AUDIT_ID_PATTERN, AUDIT_ID_RULE

__all__ = ["build_app"]

log = structlog.get_logger("auditrec.api")

READY_TIMEOUT = 3.0
AuditIdPath = Annotated[
    str,
    Path(
        pattern=AUDIT_ID_PATTERN,
        description=f"The audit id: {AUDIT_ID_RULE.removeprefix('must be ')}.",
        examples=["a-123"],
    ),
]
_CREDENTIALS_IN_URL = re.compile(r"(\w+://)[^/\s@]+@")

# --- helpers -----------------------------------------------------------------------------


def _safe(exc: BaseException) -> str:
    """An error for a client: its kind and message, minus any credentials in URLs."""
    text = _CREDENTIALS_IN_URL.sub(r"\1***@", str(exc))[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _audit_json(row: AuditRow) -> dict[str, Any]:
    return row_dict(row)


def _reconciliation(outcome: Outcome) -> dict[str, Any]:
    return outcome.as_dict()


# --- the app -----------------------------------------------------------------------------


def build_app(ops: Operations) -> FastAPI:
    """The API over ``ops`` (its backends already started by the caller)."""
    runtime = ops.rt
    settings = runtime.settings
    max_body = settings.api_max_body_bytes
    tokens = settings.api_token_list()

    app = FastAPI(
        title="auditrec",
        version="1",
        description=(
            "Audit status with on-demand reconciliation against Cloudflare Workflows, the "
            "audit history with the decision behind every step, and event ingestion."
            + (
                " Every route except /healthz and /metrics needs `Authorization: Bearer <token>`."
                if tokens
                else ""
            )
        ),
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.runtime = runtime
    app.state.operations = ops
    app.add_middleware(BodyLimit, max_bytes=max_body)

    guarded = [Depends(token_check(tokens))] if tokens else []
    public = APIRouter(tags=["operations"])
    private = APIRouter(dependencies=guarded, responses=R401 if tokens else None)

    # -- errors -----------------------------------------------------------------------------

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err.get("loc", ())) or "request"
            problems.append(f"{loc}: {err.get('msg', 'invalid')}")
        return JSONResponse({"detail": problems}, status_code=422)

    @app.exception_handler(InvalidInput)
    async def _invalid_input(request: Request, exc: InvalidInput) -> JSONResponse:
        return JSONResponse({"detail": exc.problems, "message": str(exc)}, status_code=422)

    @app.exception_handler(NotFound)
    async def _not_found(request: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    @app.exception_handler(NoServer)
    async def _no_server(request: Request, exc: NoServer) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=503)

    @app.exception_handler(BodyTooLarge)
    async def _body_too_large(request: Request, exc: BodyTooLarge) -> JSONResponse:
        return too_large(max_body)

    @app.exception_handler(AuditrecError)
    async def _infrastructure(request: Request, exc: AuditrecError) -> JSONResponse:
        if isinstance(exc, InfrastructureError):
            what = "database" if isinstance(exc, StoreError) else "event log or API"
            log.warning("request failed", path=request.url.path, error=_safe(exc))
            return JSONResponse(
                {
                    "detail": f"{what} unavailable, try again: {_safe(exc)}",
                    "retriable": exc.retriable,
                },
                status_code=503,
                headers={"Retry-After": "1"} if exc.retriable else None,
            )
        log.error("request failed", path=request.url.path, error=_safe(exc))
        return JSONResponse({"detail": "internal error"}, status_code=500)

    # -- health, readiness and metrics -------------------------------------------------------

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
                return f"error: {_safe(exc)}"
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

    # -- audits ------------------------------------------------------------------------------

    @private.get(
        "/audits/{audit_id}",
        response_model=AuditStatus,
        tags=["audits"],
        summary="The reconciled audit (probes a running audit on demand)",
        responses={**R404, **R422, **R503},
    )
    async def get_audit(
        audit_id: AuditIdPath,
        probe: Annotated[
            bool,
            Query(
                description="Probe a running audit whose last observation is older than "
                "AUDITREC_ON_DEMAND_MIN_INTERVAL, and wait (up to AUDITREC_ON_DEMAND_WAIT) "
                "for the outcome. `false`: answer from the projection only."
            ),
        ] = True,
    ) -> dict[str, Any]:
        result = await ops.status(audit_id, probe=probe, inline=False)
        body = _audit_json(result.row)
        body["reconciliation"] = (
            _reconciliation(result.outcome) if result.outcome is not None else None
        )
        body["note"] = result.note
        return body

    @private.get(
        "/audits",
        response_model=AuditPage,
        tags=["audits"],
        summary="Audits, newest first (keyset pagination)",
        responses={**R422, **R503},
    )
    async def list_audits(
        status: Literal["running", "completed", "failed"] | None = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        cursor: Annotated[
            str | None,
            Query(max_length=1024, description="`next_cursor` of the previous page."),
        ] = None,
    ) -> dict[str, Any]:
        after = decode_cursor(cursor) if cursor else None
        rows = await runtime.store.list_audits(status=status, limit=limit + 1, after=after)
        page = rows[:limit]
        more = len(rows) > limit
        return {
            "audits": [_audit_json(r) for r in page],
            "next_cursor": encode_cursor(page[-1]) if more and page else None,
        }

    @private.get(
        "/audits/{audit_id}/events",
        response_model=AuditHistory,
        tags=["audits"],
        summary="The audit's history: each event, state before → after, the rule that fired",
        responses={**R404, **R422, **R503},
    )
    async def audit_events(audit_id: AuditIdPath) -> dict[str, Any]:
        history = await runtime.store.history(audit_id)
        if not history:
            raise NotFound(f"unknown audit {audit_id!r}")
        steps = explain([h.event for h in history], runtime.policy)
        row = await runtime.store.get(audit_id)
        events = []
        for entry, step in zip(history, steps, strict=True):
            item: dict[str, Any] = dict(step.as_dict())
            item["causation_id"] = (
                str(entry.event.causation_id) if entry.event.causation_id else None
            )
            item["data"] = entry.event.data.model_dump(mode="json")
            if entry.position is not None:
                topic, partition, offset = entry.position
                item["position"] = {"topic": topic, "partition": partition, "offset": offset}
            events.append(item)
        return {"audit_id": audit_id, "status": row.status if row else None, "events": events}

    # -- events and sweeps -------------------------------------------------------------------

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

    # -- docs (behind the token like everything else) ----------------------------------------

    @private.get("/openapi.json", include_in_schema=False)
    async def openapi_json() -> JSONResponse:
        return JSONResponse(app.openapi())

    @private.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title="auditrec API")

    app.include_router(public)
    app.include_router(private)

    base_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = base_openapi()
            schemas = schema.setdefault("components", {}).setdefault("schemas", {})
            for name, value in event_input_schemas().items():
                schemas.setdefault(name, value)
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]
    return app
