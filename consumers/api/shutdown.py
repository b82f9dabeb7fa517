"""What a client sees while ``serve`` shuts down: a request that arrives then is answered
``503 {"detail": "shutting down"}`` with ``Connection: close`` (a load balancer retries it
elsewhere), and a request still in flight when the grace period ends is cut with the same JSON
503 rather than a dropped connection or a traceback."""

from __future__ import annotations

import asyncio
import contextlib
import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["Closing", "Draining"]

_BODY = json.dumps({"detail": "shutting down: retry on another instance"}).encode()
_START: Message = {
    "type": "http.response.start",
    "status": 503,
    "headers": [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(_BODY)).encode()),
        (b"connection", b"close"),
        (b"retry-after", b"1"),
    ],
}


class Closing:
    """Set when the server begins to shut down."""

    def __init__(self) -> None:
        self.closing = False


class Draining:
    def __init__(self, app: ASGIApp, state: Closing) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.state.closing:
            await _unavailable(send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except asyncio.CancelledError:
            if started:
                raise
            # Cut by the shutdown's grace period (the server cancels the request's task): say
            # so, and end the request here, which is what the cancellation asks.
            with contextlib.suppress(Exception):  # the connection may be gone already
                await _unavailable(send)


async def _unavailable(send: Send) -> None:
    await send(_START)
    await send({"type": "http.response.body", "body": _BODY})
