"""What keeps web pages of other sites out of the API, whatever a browser of the operator's
visits (DESIGN §10):

- :class:`JsonPosts`: every ``POST`` but the console's needs a JSON content type
  (``application/json``, or CloudEvents' structured or batch type), bodiless ones included,
  or a CloudEvent in binary mode (its ``ce-*`` headers); anything else is 415. A page may send
  a form, ``text/plain`` or no body at all without asking, but a JSON content type or a
  ``ce-*`` header only after a CORS preflight, which the API never answers: it sends no CORS
  headers. The console's own forms (``/ui/…``) carry a CSRF token and a ``SameSite`` cookie.
- :class:`HostCheck`: on an API without tokens, the ``Host`` header must name one of
  ``AUDITREC_API_ALLOWED_HOSTS`` (any port), 421 otherwise, so a page whose name is made to
  resolve to this address (DNS rebinding) gets nothing from it. ``/healthz``, ``/readyz`` and
  ``/metrics`` answer any ``Host``: kubelets and scrapers send the pod's address.
- :class:`SecurityHeaders`: no answer may be framed, sniffed into another type or leak its
  address in a ``Referer``; the console's pages also carry a Content-Security-Policy that
  allows only this origin's own styles, scripts, reads (the overview's live refresh), images and
  form targets (no inline script).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from consumers.operations.contracts.cloudevents import BATCH, STRUCTURED, is_binary

__all__ = [
    "ANY_HOST",
    "CONSOLE_POLICY",
    "JSON_TYPES",
    "UNCHECKED_HOST_PATHS",
    "HostCheck",
    "JsonPosts",
    "SecurityHeaders",
    "host_name",
]

JSON_TYPES: Final = frozenset({"application/json", STRUCTURED, BATCH})
UNCHECKED_HOST_PATHS: Final = frozenset({"/healthz", "/readyz", "/metrics"})
ANY_HOST: Final = "*"
_CONSOLE: Final = "/ui"
CONSOLE_POLICY: Final = (
    "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; "
    "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_EVERY_ANSWER: Final = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
)


def _console(path: str) -> bool:
    return path == _CONSOLE or path.startswith(_CONSOLE + "/")


class JsonPosts:
    """415 for a ``POST`` outside the console without a JSON content type."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and not _console(scope["path"]):
            headers = Headers(scope=scope)
            given = headers.get("content-type", "")
            media_type = given.split(";", 1)[0].strip().lower()
            if media_type not in JSON_TYPES and not is_binary(headers):
                detail = (
                    f"POST {scope['path']} needs Content-Type: application/json (a POST "
                    f"without a body too), got {given[:100]!r}"
                )
                response = JSONResponse(
                    {"detail": detail},
                    status_code=415,
                    headers={"Accept-Post": ", ".join(sorted(JSON_TYPES))},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def host_name(value: str) -> str:
    """The name of a ``Host`` header, lower case, without its port."""
    value = value.strip().lower()
    if value.startswith("["):  # an IPv6 address: [::1]:8080
        end = value.find("]")
        return value[: end + 1] if end != -1 else value
    if value.count(":") == 1:
        value = value.rpartition(":")[0]
    return value.rstrip(".")


class HostCheck:
    """421 for a request whose ``Host`` is none of ``allowed`` (``*``: any)."""

    def __init__(self, app: ASGIApp, allowed: Collection[str]) -> None:
        self.app = app
        self.allowed = frozenset(allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and ANY_HOST not in self.allowed
            and scope["path"] not in UNCHECKED_HOST_PATHS
        ):
            given = Headers(scope=scope).get("host", "")
            if host_name(given) not in self.allowed:
                detail = (
                    f"Host {given[:100]!r} is not one of AUDITREC_API_ALLOWED_HOSTS "
                    f"({', '.join(sorted(self.allowed))}): an API without tokens answers only "
                    "the names it is known by"
                )
                response = JSONResponse({"detail": detail}, status_code=421)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class SecurityHeaders:
    """``nosniff``, ``DENY`` framing and no referrer on every answer; the console's pages
    also get :data:`CONSOLE_POLICY`. (The API's own ``/docs`` page runs Swagger UI's inline
    start-up script, so the policy is the console's only.)"""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        added = list(_EVERY_ANSWER)
        if _console(scope["path"]):
            added.append((b"content-security-policy", CONSOLE_POLICY.encode()))

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *added]
            await send(message)

        await self.app(scope, receive, with_headers)
