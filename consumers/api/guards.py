"""What the HTTP API checks before a handler runs: bearer tokens and body size.

Tokens are compared in constant time against every configured token and never logged. A body
larger than the limit is refused with 413: by ``Content-Length`` before anything is read
(:class:`BodyLimit`), and while streaming otherwise (:func:`read_body`).
"""

# No `from __future__ import annotations`: FastAPI evaluates the dependency's annotations.

import hmac
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["BodyLimit", "BodyTooLarge", "read_body", "token_check", "too_large"]


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


def token_check(tokens: Sequence[str]) -> Callable[..., Awaitable[None]]:
    expected = [t.encode() for t in tokens]
    bearer = HTTPBearer(auto_error=False, description="One of the tokens in AUDITREC_API_TOKENS.")

    async def require_token(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> None:
        given = credentials.credentials.encode() if credentials is not None else b""
        matched = False
        for token in expected:  # every token, so timing says nothing about which matched
            matched |= hmac.compare_digest(given, token)
        if not matched:
            raise HTTPException(
                401,
                "missing or invalid bearer token (Authorization: Bearer <token>)",
                headers={"WWW-Authenticate": "Bearer"},
            )

    return require_token
