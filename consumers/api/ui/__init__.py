"""The operator console at ``/ui``: server-rendered pages (Jinja2) over the same operations
as the API, readable without JavaScript, with its stylesheet served from the package.

- :mod:`~consumers.api.ui.access`: credentials from ``AUDITREC_API_TOKENS`` and the signed
  session cookie; :mod:`~consumers.api.ui.session`: login, logout, the checks of pages and forms.
- :mod:`~consumers.api.ui.pages`: overview, audits, one audit (with
  :mod:`~consumers.api.ui.diagram`, the state diagram), the outcome feed's parked deliveries,
  the orphans;
  :mod:`~consumers.api.ui.actions`: the forms that change something;
  :mod:`~consumers.api.ui.tools`: dead letters and the backtest.
"""

# No `from __future__ import annotations`: FastAPI evaluates the endpoints' annotations.

from collections.abc import AsyncIterator

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles

from consumers.api.ui.access import Credentials
from consumers.api.ui.actions import add_action_routes, add_orphan_actions
from consumers.api.ui.pages import add_orphans_page, add_read_pages
from consumers.api.ui.render import STATIC, page
from consumers.api.ui.session import Forbidden, LoginRequired, add_session_routes, login_redirect
from consumers.api.ui.tools import add_tool_pages
from consumers.operations.incidents import current_incidents, forget_incidents
from consumers.operations.service import Operations

__all__ = ["STATIC_PATH", "add_console"]

STATIC_PATH = "/ui/static"


def add_console(app: FastAPI, ops: Operations) -> None:
    """Mount the console on ``app``. It checks its own sessions (a browser sends no bearer
    token), so it sits outside the API's token guard, with the same tokens and scopes."""
    app.state.console_credentials = Credentials(ops.backends.settings.api_token_specs())

    async def incidents(request: Request) -> AsyncIterator[None]:
        """What the banner of every page shows (kept a few seconds per process). A form's
        answer (a preview, a done page) goes without it, as it would show the state from
        before the action; after an action the next page gathers them afresh."""
        if request.method == "GET":
            request.state.incidents = await current_incidents(ops)
        yield
        if request.method != "GET":
            forget_incidents(ops)

    router = APIRouter(tags=["console"], dependencies=[Depends(incidents)])
    add_session_routes(router)
    add_read_pages(router, ops)
    add_orphans_page(router, ops)
    add_action_routes(router, ops)
    add_orphan_actions(router, ops)
    add_tool_pages(router, ops)
    app.mount(STATIC_PATH, StaticFiles(directory=STATIC), name="console-static")
    app.include_router(router)

    @app.exception_handler(LoginRequired)
    async def to_login(request: Request, exc: LoginRequired) -> Response:
        return login_redirect(exc)

    @app.exception_handler(Forbidden)
    async def forbidden(request: Request, exc: Forbidden) -> Response:
        return page(request, "error.html", status_code=403, problems=[exc.why], needed=exc.needed)
