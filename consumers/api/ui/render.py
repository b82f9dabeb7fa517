"""The console's templates (Jinja2, from the package) and the filters they share."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates

from consumers.api.ui.access import SESSION_SECONDS

__all__ = ["COOKIE", "STATIC", "TEMPLATES", "age", "page", "set_cookie", "when"]

COOKIE = "auditrec_console"

HERE = Path(__file__).parent
STATIC = HERE / "static"
TEMPLATES = Jinja2Templates(directory=str(HERE / "templates"))


def age(span: timedelta | None) -> str:
    """``3d 4h``, ``2h 5m``, ``4m 10s``: two units are enough to compare ages at a glance."""
    if span is None:
        return "-"
    seconds = int(span.total_seconds())
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    units = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    while len(units) > 1 and units[0][0] == 0:
        units.pop(0)
    shown = [f"{n}{unit}" for n, unit in units[:2] if n or unit == units[0][1]]
    return sign + " ".join(shown)


def when(value: datetime | str | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return value.strftime("%Y-%m-%d %H:%M:%SZ")


TEMPLATES.env.filters["age"] = age
TEMPLATES.env.filters["when"] = when


def page(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """Render ``name`` with the session (``request.state.session``, set by the console's
    dependencies) and its CSRF token in the context, so every form can carry it."""
    session = getattr(request.state, "session", None)
    context.setdefault("session", session)
    context.setdefault("csrf", session.csrf() if session is not None else "")
    # `can("operate")`: whether the session may use a form (a page shows no form it may not)
    context.setdefault("can", session.can if session is not None else lambda scope: False)
    context.setdefault("status_code", status_code)  # the error page's kind
    context.setdefault("open_console", getattr(request.state, "open_console", False))
    response = TEMPLATES.TemplateResponse(request, name, context, status_code=status_code)
    fresh = getattr(request.state, "new_cookie", None)
    if fresh is not None:  # the open console's first page: its anonymous session
        set_cookie(response, request, fresh)
    return response


def set_cookie(response: Response, request: Request, value: str) -> None:
    """The session cookie: HTTP-only, ``SameSite=Strict``, ``Secure`` over HTTPS, and sent
    to the console's paths only."""
    response.set_cookie(
        COOKIE,
        value,
        max_age=SESSION_SECONDS,
        path="/ui",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
