"""Failed authentications, throttled per client (DESIGN §10): guessing a token (or the
console's sign-in) costs time.

Each client has a bucket of ``AUDITREC_API_AUTH_FAILURES_PER_MINUTE`` failures that refills at
that rate. A client is its address (behind a proxy of ``AUDITREC_API_FORWARDED_ALLOW_IPS``, the
address the proxy forwards): an IPv4 address, or the /64 network of an IPv6 address, since one
host commonly holds a whole /64. Every 401 the API answers (a missing or wrong bearer token, an
unknown token typed into the console's sign-in) takes one. An empty bucket makes every request
of that client a 429 with ``Retry-After`` (the seconds until a failure is allowed again), its
right token included, so a guesser learns nothing while it waits. Only what answers without a
token is exempt: ``/healthz`` and ``/metrics``, and ``/readyz`` when it is public
(``AUDITREC_API_PUBLIC_READYZ``; behind the token, its 401 and 200 would tell a wrong token from
a right one). The count is the process's own: replicas each keep theirs, so N replicas behind
one balancer allow N times the rate.

Memory: past ``max_clients`` buckets, the forgiven ones (refilled) are dropped, then the least
recently failed, but never one that is held: a flood of failures from many addresses cannot make
the throttle forget a guesser. The held buckets are bounded all the same: a bucket is held for at
most 60/N seconds after its last failure, so there are never more than the failures the process
answers in that time.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections.abc import Callable, Collection

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["ALWAYS_OPEN", "FailedAuthThrottle", "Throttle", "client_of", "unthrottled"]

MAX_CLIENTS = 100_000  # buckets kept past which the forgiven, then the not held, are dropped
ALWAYS_OPEN = frozenset({"/healthz", "/metrics"})  # never behind the token
IPV6_CLIENT_PREFIX = 64  # an IPv6 client is its /64: a host is commonly given a whole one


def unthrottled(public_readyz: bool) -> frozenset[str]:
    """The paths the throttle lets through: those that answer without a token."""
    return (ALWAYS_OPEN | {"/readyz"}) if public_readyz else ALWAYS_OPEN


def client_of(address: str) -> str:
    """The client an address counts as: an IPv4 address (an IPv4-mapped IPv6 one too), the
    /64 of an IPv6 address, anything else (a Unix socket's name) as it is."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        network = ipaddress.IPv6Network((int(ip), IPV6_CLIENT_PREFIX), strict=False)
        return str(network)
    return str(ip)


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
        self._prune_past = max_clients  # grows while held buckets alone fill the table
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
        self._buckets.pop(client, None)  # re-inserted last: the dict is least recent first
        self._buckets[client] = (max(0.0, left - 1.0), now)
        if len(self._buckets) > self._prune_past:
            self._prune(now)

    def _prune(self, now: float) -> None:
        """A tenth under ``max_clients``: the forgiven first, then the least recently failed
        of those not held; a held bucket is kept. The next prune waits for a tenth of
        ``max_clients`` more buckets, so a table of held buckets is not scanned at every
        failure."""
        slack = max(1, self.max_clients // 10)
        target = self.max_clients - slack
        lefts = {client: self._left(client, now) for client in self._buckets}
        for client, left in lefts.items():
            if left >= self.capacity:
                del self._buckets[client]
        for client, left in lefts.items():  # least recently failed first
            if len(self._buckets) <= target:
                break
            if 1.0 <= left < self.capacity:
                del self._buckets[client]
        self._prune_past = max(self.max_clients, len(self._buckets) + slack)

    def __len__(self) -> int:
        return len(self._buckets)


class FailedAuthThrottle:
    """The ASGI side of :class:`Throttle`: counts 401 answers, answers 429 while held; the
    ``open_paths`` (answered without a token) pass uncounted."""

    def __init__(self, app: ASGIApp, per_minute: int, open_paths: Collection[str]) -> None:
        self.app = app
        self.throttle = Throttle(per_minute)
        self.open_paths = frozenset(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        client = client_of(scope["client"][0]) if scope.get("client") else "unknown"
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
