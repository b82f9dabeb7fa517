"""The console's sign-in: the login form, logout, and the checks every page and form passes.

A page needs a session with ``read``: without one the browser is sent to the login form (303),
which comes back to the page after. A form that changes anything (POST) needs the session
cookie, a CSRF token bound to that session, and ``operate``; otherwise it is refused with a 403
page and nothing happens. The cookie is HTTP-only and ``SameSite=Strict`` (``Secure`` over
HTTPS). With no token configured the console is open: the first page sets an anonymous session,
so forms carry a CSRF token all the same.
"""

# No `from __future__ import annotations`: FastAPI evaluates the endpoints' annotations.

from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from consumers.api.guards import read_body
from consumers.api.ui.access import Credentials, Session
from consumers.api.ui.render import COOKIE, page, set_cookie

__all__ = [
    "Forbidden",
    "LoginRequired",
    "add_session_routes",
    "form",
    "login_redirect",
    "operator",
    "viewer",
]

FORM_LIMIT = 64 * 1024  # a console form is a few fields


class LoginRequired(Exception):
    """No valid session: answered with a redirect to the login form."""

    def __init__(self, back: str) -> None:
        self.back = back


class Forbidden(Exception):
    """Answered with the 403 page, naming why."""

    def __init__(self, why: str) -> None:
        self.why = why


def _credentials(request: Request) -> Credentials:
    found: Credentials = request.app.state.console_credentials
    return found


async def viewer(request: Request) -> Session:
    """The session of a page (``read``); the open console makes one on the first visit."""
    credentials = _credentials(request)
    session = credentials.session(request.cookies.get(COOKIE))
    request.state.open_console = credentials.open
    if session is None:
        anonymous = credentials.anonymous()
        if anonymous is None:
            back = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            raise LoginRequired(back)
        value, session = credentials.open_session(anonymous)
        request.state.new_cookie = value
    request.state.session = session
    if not session.can("read"):
        raise Forbidden(f"the token {session.name!r} may not read")
    return session


async def form(request: Request) -> dict[str, str]:
    """The fields of a URL-encoded form (the last value of each)."""
    raw = await read_body(request, FORM_LIMIT)
    fields = parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=True)
    return {name: values[-1] for name, values in fields.items()}


async def operator(request: Request, fields: dict[str, str]) -> Session:
    """The session behind a form that changes something: cookie, CSRF token, ``operate``."""
    credentials = _credentials(request)
    request.state.open_console = credentials.open
    session = credentials.session(request.cookies.get(COOKIE))
    if session is None:
        raise Forbidden("no valid session: sign in, then send the form from the console")
    request.state.session = session
    if not session.csrf_ok(fields.get("csrf", "")):
        raise Forbidden("the form's CSRF token is missing or not this session's")
    if not session.can("operate"):
        raise Forbidden(f"the token {session.name!r} has no operate scope")
    return session


def _safe_next(target: str | None) -> str:
    """Only a path of the console: never another site (no open redirect)."""
    if target and target.startswith("/ui") and not target.startswith("//"):
        return target
    return "/ui"


def add_session_routes(router: APIRouter) -> None:
    @router.get("/ui/login", response_class=HTMLResponse, include_in_schema=False)
    async def login_form(request: Request, next: str = "/ui") -> Response:
        if _credentials(request).open:
            return RedirectResponse(_safe_next(next), status_code=303)
        return page(request, "login.html", next=_safe_next(next), error=None)

    @router.post("/ui/login", response_class=HTMLResponse, include_in_schema=False)
    async def login(request: Request) -> Response:
        fields = await form(request)
        target = _safe_next(fields.get("next"))
        credential = _credentials(request).match(fields.get("token", "").strip())
        if credential is None:
            return page(request, "login.html", status_code=401, next=target, error="unknown token")
        value, _ = _credentials(request).open_session(credential)
        response = RedirectResponse(target, status_code=303)
        set_cookie(response, request, value)
        return response

    @router.post("/ui/logout", include_in_schema=False)
    async def logout(request: Request) -> Response:
        fields = await form(request)
        session = _credentials(request).session(request.cookies.get(COOKIE))
        if session is None or not session.csrf_ok(fields.get("csrf", "")):
            raise Forbidden("the form's CSRF token is missing or not this session's")
        response = RedirectResponse("/ui/login", status_code=303)
        response.delete_cookie(COOKIE, path="/ui", httponly=True, samesite="strict")
        return response


def login_redirect(exc: LoginRequired) -> RedirectResponse:
    return RedirectResponse(f"/ui/login?next={quote(exc.back, safe='')}", status_code=303)
