"""The console's sign-in: the login form, logout, and the checks every page and form passes.

A page needs a session with ``read``: without one the browser is sent to the login form (303),
which comes back to the page after. A form that changes anything (POST) needs the session
cookie, a CSRF token bound to that session, and ``operate``; otherwise it is refused with a 403
page (naming the scope needed, when that is what is missing) and nothing happens. Pages offer
such forms only to a session with ``operate`` (``can`` in the templates' context). The cookie
is HTTP-only and ``SameSite=Strict`` (``Secure`` over HTTPS, a TLS proxy's too:
``AUDITREC_API_FORWARDED_ALLOW_IPS``). With no token configured the console is open: the
first page sets an anonymous session, so forms carry a CSRF token all the same.

The sign-in form carries a CSRF token of its own (its cookie and its field must agree, and it
must be one the server signed: a value another origin planted in the cookie is refused), and a
sign-in a browser marks ``Sec-Fetch-Site: same-site`` (a sibling subdomain's page) is refused
too; any form post a browser marks ``Sec-Fetch-Site: cross-site`` is refused outright.
Logging out ends every session of the token, on every replica: the token's session generation
(in the store) moves on, and a session of an older generation is sent back to the login form.
"""

# No `from __future__ import annotations`: FastAPI evaluates the endpoints' annotations.

from datetime import UTC, datetime
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from consumers.api.guards import read_body
from consumers.api.ui.access import LOGIN_SECONDS, Credentials, Session
from consumers.api.ui.render import COOKIE, page, set_cookie
from consumers.runtime.tokens import Scope
from projections.coordination import Coordination

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
LOGIN_COOKIE = "auditrec_login"  # the sign-in form's CSRF token, for the form's path only
LOGIN_PATH = "/ui/login"


class LoginRequired(Exception):
    """No valid session: answered with a redirect to the login form."""

    def __init__(self, back: str) -> None:
        self.back = back


class Forbidden(Exception):
    """Answered with the 403 page, naming why (and the scope needed, when that is why)."""

    def __init__(self, why: str, needed: Scope | None = None) -> None:
        self.why = why
        self.needed = needed


def _credentials(request: Request) -> Credentials:
    found: Credentials = request.app.state.console_credentials
    return found


def _coordination(request: Request) -> Coordination:
    found: Coordination = request.app.state.backends.store.coordination
    return found


async def _current(request: Request, session: Session | None) -> Session | None:
    """``session`` while its token's generation is still the one it was made in."""
    if session is None:
        return None
    generation = await _coordination(request).session_generation(session.name)
    return session if session.generation == generation else None


async def viewer(request: Request) -> Session:
    """The session of a page (``read``); the open console makes one on the first visit."""
    credentials = _credentials(request)
    session = await _current(request, credentials.session(request.cookies.get(COOKIE)))
    request.state.open_console = credentials.open
    if session is None:
        anonymous = credentials.anonymous()
        if anonymous is None:
            back = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            raise LoginRequired(back)
        generation = await _coordination(request).session_generation(anonymous.name)
        value, session = credentials.open_session(anonymous, generation=generation)
        request.state.new_cookie = value
    request.state.session = session
    if not session.can("read"):
        raise Forbidden(f"the token {session.name!r} may not read", "read")
    return session


async def form(request: Request, limit: int = FORM_LIMIT) -> dict[str, str]:
    """The fields of a URL-encoded form (the last value of each; at most ``limit`` bytes); a
    form a page of another site sent (``Sec-Fetch-Site: cross-site``, as browsers mark it) is
    refused unread."""
    if request.headers.get("sec-fetch-site", "").lower() == "cross-site":
        raise Forbidden("a page of another site sent this form: send it from the console")
    raw = await read_body(request, limit)
    fields = parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=True)
    return {name: values[-1] for name, values in fields.items()}


async def operator(request: Request, fields: dict[str, str]) -> Session:
    """The session behind a form that changes something: cookie, CSRF token, ``operate``."""
    credentials = _credentials(request)
    request.state.open_console = credentials.open
    session = await _current(request, credentials.session(request.cookies.get(COOKIE)))
    if session is None:
        raise Forbidden("no valid session: sign in, then send the form from the console")
    request.state.session = session
    if not session.csrf_ok(fields.get("csrf", "")):
        raise Forbidden("the form's CSRF token is missing or not this session's")
    if not session.can("operate"):
        raise Forbidden(
            f"the token {session.name!r} has no operate scope (its scope is {session.scope})",
            "operate",
        )
    return session


def _safe_next(target: str | None) -> str:
    """Only a path of the console: never another site (no open redirect)."""
    if target and target.startswith("/ui") and not target.startswith("//"):
        return target
    return "/ui"


def _login_page(request: Request, target: str, status_code: int, error: str | None) -> Response:
    """The sign-in form with its CSRF token, in its field and its cookie (the cookie's own
    while it holds one the server made and not expired, a fresh one otherwise)."""
    credentials = _credentials(request)
    kept = request.cookies.get(LOGIN_COOKIE)
    token = kept if kept and credentials.login_token_valid(kept) else credentials.login_token()
    response = page(
        request, "login.html", status_code=status_code, next=target, error=error, login=token
    )
    response.set_cookie(
        LOGIN_COOKIE,
        token,
        max_age=LOGIN_SECONDS,
        path=LOGIN_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


def add_session_routes(router: APIRouter) -> None:
    @router.get(LOGIN_PATH, response_class=HTMLResponse, include_in_schema=False)
    async def login_form(request: Request, next: str = "/ui") -> Response:
        if _credentials(request).open:
            return RedirectResponse(_safe_next(next), status_code=303)
        return _login_page(request, _safe_next(next), 200, None)

    @router.post(LOGIN_PATH, response_class=HTMLResponse, include_in_schema=False)
    async def login(request: Request) -> Response:
        fields = await form(request)
        target = _safe_next(fields.get("next"))
        # A sibling subdomain (same site) can plant a cookie and post a form with a pair the
        # server made for it: the sign-in form is only ever sent from its own page.
        same_site = request.headers.get("sec-fetch-site", "").lower() == "same-site"
        if same_site or not _credentials(request).login_token_ok(
            request.cookies.get(LOGIN_COOKIE), fields.get("csrf", "")
        ):
            why = "the sign-in form expired or came from elsewhere: sign in again from here"
            return _login_page(request, target, 403, why)
        credential = _credentials(request).match(fields.get("token", "").strip())
        if credential is None:
            return _login_page(request, target, 401, "unknown token")
        generation = await _coordination(request).session_generation(credential.name)
        value, _ = _credentials(request).open_session(credential, generation=generation)
        response = RedirectResponse(target, status_code=303)
        set_cookie(response, request, value)
        response.delete_cookie(LOGIN_COOKIE, path=LOGIN_PATH, httponly=True, samesite="strict")
        return response

    @router.post("/ui/logout", include_in_schema=False)
    async def logout(request: Request) -> Response:
        fields = await form(request)
        session = _credentials(request).session(request.cookies.get(COOKIE))
        if session is None or not session.csrf_ok(fields.get("csrf", "")):
            raise Forbidden("the form's CSRF token is missing or not this session's")
        # Every session of the token ends, on every replica, copies of the cookie included.
        await _coordination(request).end_sessions(session.name, datetime.now(UTC))
        response = RedirectResponse(LOGIN_PATH, status_code=303)
        response.delete_cookie(COOKIE, path="/ui", httponly=True, samesite="strict")
        return response


def login_redirect(exc: LoginRequired) -> RedirectResponse:
    return RedirectResponse(f"/ui/login?next={quote(exc.back, safe='')}", status_code=303)
