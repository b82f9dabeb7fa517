"""What the HTTP API checks before a handler runs: bearer tokens, their scopes, and body size.

Tokens are compared in constant time against every configured token and never logged
(:mod:`consumers.runtime.tokens`). What a request needs follows from the route
(:func:`needed_scope`): ``read`` for GET, ``publish`` for ``POST /events``, ``operate`` for
every other change. No token or an unknown one is a 401; a token whose scope is too small a
403 naming the scope needed. The token that matched is kept on the request
(:func:`acting_token`), so a handler records who acted (:func:`actor_of`: ``token:<name>``,
or ``anonymous`` on an API without tokens); a body naming another actor is refused with 403
naming both (:func:`claimed_actor`). A body
larger than the limit is refused with 413: by ``Content-Length`` before anything is read
(:class:`BodyLimit`), and while streaming otherwise (:func:`read_body`).
"""

# No `from __future__ import annotations`: FastAPI evaluates the dependency's annotations.

from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.types import ASGIApp, Receive, Scope, Send

from consumers.runtime.tokens import ApiToken, actor_name, match
from consumers.runtime.tokens import Scope as TokenScope
from statemachine.errors import Refused

__all__ = [
    "BodyLimit",
    "BodyTooLarge",
    "acting_token",
    "actor_of",
    "claimed_actor",
    "needed_scope",
    "read_body",
    "token_check",
    "too_large",
]


class BodyTooLarge(Exception):
    """A streamed body went past the limit (answered with 413)."""


def too_large(limit: int) -> JSONResponse:
    return JSONResponse(
        {"detail": f"request body too large: the limit is {limit} bytes"}, status_code=413
    )


class BodyLimit:
    """Refuse a request whose ``Content-Length`` exceeds the limit before reading anything.
    Handlers that read a body enforce the same limit while streaming (chunked bodies)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for name, value in scope.get("headers", ()):
                if name == b"content-length":
                    text = value.decode("latin-1").strip()
                    if not text.isdigit():
                        response = JSONResponse({"detail": "invalid Content-Length"}, 400)
                        await response(scope, receive, send)
                        return
                    if int(text) > self.max_bytes:
                        await too_large(self.max_bytes)(scope, receive, send)
                        return
        await self.app(scope, receive, send)


async def read_body(request: Request, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def needed_scope(method: str, path: str) -> TokenScope:
    """The scope a request needs: reading is ``read``, publishing events ``publish``, any
    other change (operator actions, the brake, sweeps) ``operate``."""
    if method in ("GET", "HEAD", "OPTIONS"):
        return "read"
    if path.rstrip("/") == "/events":
        return "publish"
    return "operate"


def acting_token(request: Request) -> ApiToken | None:
    """The token the request was let in with (``None`` when the API has no tokens)."""
    token: ApiToken | None = getattr(request.state, "api_token", None)
    return token


def actor_of(request: Request) -> str:
    """Who acts: ``token:<name>`` of the token that authenticated, or ``anonymous`` when the
    API has no tokens. Never what a body says."""
    return actor_name(acting_token(request))


def claimed_actor(actor: str, claimed: str | None, where: str = "body.actor") -> str:
    """``actor``, when a body's ``claimed`` actor is absent or the same; otherwise
    :class:`Refused` (403) naming both: the actor is who authenticated, and a person acted
    for is named as ``on_behalf_of``."""
    if claimed is not None and claimed != actor:
        raise Refused(
            f"{where}: {claimed!r} is not who authenticated ({actor!r}); the actor is the "
            "token's, never the body's (name a person you act for in on_behalf_of)"
        )
    return actor


def token_check(tokens: Sequence[ApiToken]) -> Callable[..., Awaitable[None]]:
    configured = tuple(tokens)
    bearer = HTTPBearer(auto_error=False, description="One of the tokens in AUDITREC_API_TOKENS.")

    async def require_token(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> None:
        token = match(configured, credentials.credentials if credentials is not None else None)
        if token is None:
            raise HTTPException(
                401,
                "missing or invalid bearer token (Authorization: Bearer <token>)",
                headers={"WWW-Authenticate": "Bearer"},
            )
        needed = needed_scope(request.method, request.url.path)
        if not token.allows(needed):
            raise HTTPException(
                403,
                f"{request.method} {request.url.path} needs scope {needed}; token "
                f"{token.name!r} has scope {token.scope}",
            )
        request.state.api_token = token

    return require_token
