"""Request metrics: each answer counted by method, route (the matched path template, so an id
in the path does not make a series of its own) and status, with its latency."""

from __future__ import annotations

import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from consumers.runtime.metrics import HTTP_DURATION, HTTP_REQUESTS

__all__ = ["RequestMetrics"]


class RequestMetrics:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what a request that raised through here answers

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route: Any = scope.get("route")
            path = getattr(route, "path", None) or "unmatched"
            method = scope.get("method", "GET")
            HTTP_REQUESTS.labels(method, path, str(status)).inc()
            HTTP_DURATION.labels(method, path).observe(time.perf_counter() - started)
