"""The console's templates (Jinja2, from the package) and the filters they share: ``|when``
(every timestamp as ``2026-12-06 12:34:56Z``, UTC), ``|timestamp`` (that in a ``<time>`` element
with the time relative to the page's ``now``, '3 min ago'), ``|ago`` and ``|age``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates
from jinja2 import pass_context
from jinja2.runtime import Context
from markupsafe import Markup, escape

from consumers.api.ui.access import SESSION_SECONDS

__all__ = [
    "COOKIE",
    "REFRESH_SECONDS",
    "STATIC",
    "TEMPLATES",
    "WHEN_FORMAT",
    "age",
    "ago",
    "incidents_shown",
    "page",
    "set_cookie",
    "timestamp",
    "when",
]

COOKIE = "auditrec_console"
REFRESH_SECONDS = 5  # live pages read themselves again this often, by default

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


# The console's one timestamp format: UTC, ISO 8601 with a space for the "T" (RFC 3339 allows
# it) and whole seconds: ``2026-12-06 12:34:56Z``. A <time> element carries the full value.
WHEN_FORMAT = "%Y-%m-%d %H:%M:%SZ"


def _utc(value: datetime | str | None) -> datetime | None:
    """``value`` as an aware UTC datetime: naive ones are taken as UTC, ISO 8601 text parsed
    (``Z`` or an offset); ``None`` for ``None`` or text that is no timestamp."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def when(value: datetime | str | None) -> str:
    """``2026-12-06 12:34:56Z``: every timestamp the console shows, as text (see
    :func:`timestamp` for the element with the relative time); ``-`` for none."""
    at = _utc(value)
    if at is None:
        return "-" if value is None else str(value)
    return at.strftime(WHEN_FORMAT)


def ago(value: datetime | str | None, now: datetime | None = None) -> str:
    """How long before ``now`` (default: the clock) ``value`` was: ``just now``, ``45 s ago``,
    ``3 min ago``, ``2 h 5 min ago``, ``3 d 4 h ago``; ``in 3 min`` for a time to come."""
    at = _utc(value)
    if at is None:
        return "-"
    seconds = int(((_utc(now) or datetime.now(UTC)) - at).total_seconds())
    later, seconds = seconds < 0, abs(seconds)
    if seconds < 5:
        return "just now"
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        span = f"{days} d {hours} h" if hours else f"{days} d"
    elif hours:
        span = f"{hours} h {minutes} min" if minutes else f"{hours} h"
    elif minutes:
        span = f"{minutes} min"
    else:
        span = f"{secs} s"
    return f"in {span}" if later else f"{span} ago"


@pass_context
def timestamp(context: Context, value: datetime | str | None) -> Markup:
    """A timestamp on a page: ``<time datetime="2026-12-06T12:34:56Z" title="3 min ago">
    2026-12-06 12:34:56Z</time> <span class="ago">3 min ago</span>``, relative to the page's
    ``now`` (the console's clock) when it has one; ``-`` for none."""
    at = _utc(value)
    if at is None:
        return Markup("-") if value is None else escape(str(value))
    now = context.get("now")
    relative = ago(at, now if isinstance(now, datetime) else None)
    return Markup(
        '<time datetime="{iso}" title="{rel}">{text}</time> <span class="ago">{rel}</span>'
    ).format(iso=at.strftime("%Y-%m-%dT%H:%M:%SZ"), rel=relative, text=at.strftime(WHEN_FORMAT))


TEMPLATES.env.filters["age"] = age
TEMPLATES.env.filters["when"] = when
TEMPLATES.env.filters["ago"] = ago
TEMPLATES.env.filters["timestamp"] = timestamp
# A page whose <main> has data-refresh="{{ refresh_seconds }}" reads itself again this often
# (static/console.js: the overview and the lists).
TEMPLATES.env.globals["refresh_seconds"] = REFRESH_SECONDS


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
    context.setdefault("incidents", incidents_shown(request, session))
    context.setdefault("refresh_seconds", refresh_seconds(request))
    response = TEMPLATES.TemplateResponse(request, name, context, status_code=status_code)
    fresh = getattr(request.state, "new_cookie", None)
    if fresh is not None:  # the open console's first page: its anonymous session
        set_cookie(response, request, fresh)
    return response


def refresh_seconds(request: Request) -> int:
    """How often live pages read themselves again: ``AUDITREC_CONSOLE_REFRESH``."""
    backends = getattr(request.app.state, "backends", None)
    refresh = getattr(getattr(backends, "settings", None), "console_refresh", None)
    return int(refresh.total_seconds()) if refresh is not None else REFRESH_SECONDS


def incidents_shown(request: Request, session: Any) -> list[Any]:
    """The incidents for the banner of every page (gathered by the console's dependency,
    :func:`~consumers.operations.incidents.current_incidents`), to a signed-in reader only."""
    if session is None or not session.can("read"):
        return []
    return list(getattr(request.state, "incidents", []))


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
