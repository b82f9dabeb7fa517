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
- ``GET /asyncapi.json``: the AsyncAPI 3 document of the topics (next to ``/openapi.json``).
- ``GET /healthz`` and ``GET /metrics``: never behind a token (liveness probes and scrapers);
  ``GET /readyz`` reports on the dependencies and is behind the token like everything else.

- ``/ui``: the operator console (:mod:`consumers.api.ui`), for browsers: it signs in with the
  same tokens and scopes into a session cookie of its own, so it is not behind the bearer check.

With ``AUDITREC_API_TOKENS`` set, every other route — ``/docs`` and ``/openapi.json``
included — needs ``Authorization: Bearer <token>`` (401 otherwise) of a scope that allows it
(403 otherwise; :mod:`consumers.api.guards`). Tokens are compared in
constant time against every configured token and never logged. Request bodies larger than
``AUDITREC_API_MAX_BODY_BYTES`` are refused with 413, by ``Content-Length`` before anything
is read, and while streaming otherwise. Every error body is ``{"detail": ...}``: a list of
problems for 422 (each naming the item, parameter or field), a sentence otherwise; driver
errors are summarised, never echoed with credentials.

Pages of other sites get nothing (:mod:`consumers.api.crosssite`): every ``POST`` but the
console's needs a JSON content type (415 otherwise), no CORS header is ever sent, and an API
without tokens answers only a ``Host`` of ``AUDITREC_API_ALLOWED_HOSTS`` (421 otherwise).
"""

# No `from __future__ import annotations`: FastAPI must evaluate the endpoints' annotations,
# some of which (the token dependency) refer to names local to build_app.

from typing import Any

from fastapi import APIRouter, Depends, FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

from consumers.api.actions import add_action_routes
from consumers.api.audits import add_audit_routes
from consumers.api.backtest import add_backtest_routes
from consumers.api.brake import add_brake_routes
from consumers.api.commands import add_command_routes
from consumers.api.crosssite import HostCheck, JsonPosts, SecurityHeaders
from consumers.api.deadletters import add_dead_letter_routes
from consumers.api.deliveries import add_delivery_routes
from consumers.api.errors import install_error_handlers
from consumers.api.guards import BodyLimit, token_check
from consumers.api.health import add_health_routes
from consumers.api.measure import RequestMetrics
from consumers.api.models import R401, R403, event_input_schemas
from consumers.api.orphans import add_orphan_routes
from consumers.api.shutdown import Closing, Draining
from consumers.api.throttle import FailedAuthThrottle, unthrottled
from consumers.api.ui import add_console
from consumers.operations.contracts.asyncapi import asyncapi_for
from consumers.operations.service import Operations

__all__ = ["ASSETS", "build_app"]

ASSETS = "/docs/assets"  # Swagger UI's files, from the swagger-ui-bundle package
HEADERS_TOO_LARGE = {
    "description": "The request line and headers are larger than AUDITREC_API_MAX_HEADER_BYTES.",
    "content": {"text/plain": {"schema": {"type": "string"}}},
}
THROTTLED = {
    "description": "Too many failed authentications from this client: retry after the "
    "seconds of the Retry-After header.",
    "headers": {"Retry-After": {"schema": {"type": "integer"}}},
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Message"}}},
}
UNSUPPORTED = {
    "description": "Not a JSON content type (every POST needs one, a POST without a body too).",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Message"}}},
}


def build_app(ops: Operations, closing: Closing | None = None) -> FastAPI:
    """The API over ``ops`` (its backends already started by the caller); ``closing`` tells
    it the server shuts down (see :mod:`consumers.api.shutdown`)."""
    backends = ops.backends
    settings = backends.settings
    max_body = settings.api_max_body_bytes
    tokens = settings.api_token_specs()

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
    app.state.backends = backends
    app.state.operations = ops
    app.add_middleware(BodyLimit, max_bytes=max_body)
    app.add_middleware(JsonPosts)  # no request a page of another site may send unasked
    if not tokens:  # DNS rebinding: only an API without tokens answers a page's requests
        app.add_middleware(HostCheck, allowed=settings.allowed_hosts())
    app.add_middleware(Draining, state=closing or Closing())
    # Failed authentications (401s, the console's sign-in's too) cost time: 429 past a rate.
    # Only what answers without a token is exempt: /readyz behind the token is an oracle too.
    open_paths = unthrottled(settings.api_public_readyz)
    app.add_middleware(
        FailedAuthThrottle,
        per_minute=settings.api_auth_failures_per_minute,
        open_paths=open_paths,
    )
    app.add_middleware(RequestMetrics)
    app.add_middleware(SecurityHeaders)  # outermost: every answer carries them

    guarded = [Depends(token_check(tokens))] if tokens else []
    public = APIRouter(tags=["operations"])
    private = APIRouter(dependencies=guarded, responses={**R401, **R403} if tokens else None)

    install_error_handlers(app, max_body)
    add_health_routes(public, private, backends)
    add_audit_routes(private, ops)
    add_command_routes(private, ops, max_body)
    add_brake_routes(private, ops)
    add_dead_letter_routes(private, ops, max_body)
    add_backtest_routes(private, ops)
    add_action_routes(private, ops)
    add_delivery_routes(private, ops)
    add_orphan_routes(private, ops)

    # -- docs: behind the token unless AUDITREC_API_PUBLIC_DOCS; Swagger UI served from here --

    documents = public if settings.api_public_docs else private
    app.mount(ASSETS, StaticFiles(directory=swagger_ui_path), name="swagger-ui")

    @documents.get("/openapi.json", include_in_schema=False)
    async def openapi_json() -> JSONResponse:
        return JSONResponse(app.openapi())

    asyncapi: list[dict[str, Any]] = []  # built at the first request, then kept

    @documents.get("/asyncapi.json", include_in_schema=False)
    async def asyncapi_json() -> JSONResponse:
        """The AsyncAPI 3 document of this deployment's topics (``auditrec asyncapi``)."""
        if not asyncapi:
            asyncapi.append(asyncapi_for(settings))
        return JSONResponse(asyncapi[0])

    @documents.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="auditrec API",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
        )

    app.include_router(public)
    app.include_router(private)
    add_console(app, ops)  # /ui: the operator console (its own sign-in over the same tokens)

    base_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = base_openapi()
            schemas = schema.setdefault("components", {}).setdefault("schemas", {})
            for name, value in event_input_schemas().items():
                schemas.setdefault(name, value)
            for path, item in schema.get("paths", {}).items():
                if "post" in item:  # every POST answers 415 (crosssite)
                    item["post"].setdefault("responses", {}).setdefault("415", UNSUPPORTED)
                for operation in item.values():  # every request (consumers.api.bounded)
                    responses = operation.setdefault("responses", {})
                    responses.setdefault("431", HEADERS_TOO_LARGE)
                    if path not in open_paths:  # consumers.api.throttle
                        responses.setdefault("429", THROTTLED)
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]
    return app
