"""Failed authentications, throttled per client (DESIGN §10): guessing a token (or the
console's sign-in) costs time.

Each client (its address; behind a proxy of ``AUDITREC_API_FORWARDED_ALLOW_IPS``, the address
the proxy forwards) has a bucket of ``AUDITREC_API_AUTH_FAILURES_PER_MINUTE`` failures that
refills at that rate. Every 401 the API answers (a missing or wrong bearer token, an unknown
token typed into the console's sign-in) takes one. An empty bucket makes every request of that
client a 429 with ``Retry-After`` (the seconds until a failure is allowed again), its right
token included, so a guesser learns nothing while it waits; ``/healthz``, ``/readyz`` and
``/metrics`` stay open (kubelets and scrapers). The count is the process's own: replicas each
keep theirs, so N replicas behind one balancer allow N times the rate.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from consumers.api.crosssite import UNCHECKED_HOST_PATHS

__all__ = ["FailedAuthThrottle", "Throttle"]

MAX_CLIENTS = 100_000  # buckets kept at most; full ones are dropped first, then the oldest


class Throttle:
    """Token buckets of failures per client: ``per_minute`` at once, refilled at that rate."""

    def __init__(
        self,
        per_minute: int,
        clock: Callable[[], float] = time.monotonic,
        max_clients: int = MAX_CLIENTS,
    ) -> None:
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0  # failures allowed again per second
        self.clock = clock
        self.max_clients = max_clients
        self._buckets: dict[str, tuple[float, float]] = {}  # client → (left, when)

    def _left(self, client: str, now: float) -> float:
        left, when = self._buckets.get(client, (self.capacity, now))
        return min(self.capacity, left + (now - when) * self.rate)

    def retry_after(self, client: str) -> int | None:
        """Seconds ``client`` must wait (at least 1), or ``None`` when it is not held."""
        left = self._left(client, self.clock())
        if left >= 1.0:
            return None
        return max(1, math.ceil((1.0 - left) / self.rate))

    def failed(self, client: str) -> None:
        now = self.clock()
        left = self._left(client, now)
        self._buckets.pop(client, None)  # re-inserted last: the dict is oldest-first
        self._buckets[client] = (max(0.0, left - 1.0), now)
        if len(self._buckets) > self.max_clients:
            self._prune(now)

    def _prune(self, now: float) -> None:
        for client in [c for c in self._buckets if self._left(c, now) >= self.capacity]:
            del self._buckets[client]
        while len(self._buckets) > self.max_clients:
            del self._buckets[next(iter(self._buckets))]

    def __len__(self) -> int:
        return len(self._buckets)


class FailedAuthThrottle:
    """The ASGI side of :class:`Throttle`: counts 401 answers, answers 429 while held."""

    def __init__(self, app: ASGIApp, per_minute: int) -> None:
        self.app = app
        self.throttle = Throttle(per_minute)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNCHECKED_HOST_PATHS:
            await self.app(scope, receive, send)
            return
        client = scope["client"][0] if scope.get("client") else "unknown"
        wait = self.throttle.retry_after(client)
        if wait is not None:
            response = JSONResponse(
                {"detail": f"too many failed authentications from {client}: retry after {wait} s"},
                status_code=429,
                headers={"Retry-After": str(wait)},
            )
            await response(scope, receive, send)
            return

        async def counting(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 401:
                self.throttle.failed(client)
            await send(message)

        await self.app(scope, receive, counting)
