"""What keeps the probe within Cloudflare's limits: a request budget over a sliding window,
the pause a 429 asks for, and reading how long that pause is from the answer's headers.

:class:`RateLimit` keeps both in one process; :class:`SharedRateLimit` keeps them in the store,
so every process probing one account shares one budget and one pause (``auditrec serve`` uses
it). Either way a request waits out a pause or a full window when its caller's bound allows,
and is answered ``rate_limited`` only when it does not.

Every request is taken for a spender (:data:`ON_DEMAND` for status reads, :data:`WATCHDOG`,
:data:`STALL`, :data:`ORPHANS`, :data:`TERMINATE`, ``manual``, ``other``).
:class:`SharedRateLimit` keeps a floor of each window for the watchdog
(``AUDITREC_WATCHDOG_BUDGET_FLOOR``) that no other spender may take, and holds a spender to its
share of each window when given one (the status reads to ``AUDITREC_ON_DEMAND_BUDGET_SHARE``,
within what the floor leaves), so the reads never take what the watchdog needs; the store
checks both in the step that takes the slot.

Time is ``clock()`` (monotonic seconds) and waiting is ``sleep()``; tests pass a fake pair.
"""

from __future__ import annotations

import logging
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Protocol

import httpx

from consumers.runtime.settings import reserve_of, share_of
from projections.budget import RequestBudget

__all__ = [
    "FLOOR_KEPT",
    "ON_DEMAND",
    "ORPHANS",
    "OTHER",
    "SHARE_SPENT",
    "STALL",
    "TERMINATE",
    "WATCHDOG",
    "Limiter",
    "RateLimit",
    "SharedRateLimit",
    "rate_limit_pause",
    "seconds_from_retry_after",
]

_DEFAULT_PAUSE = 60.0
# A slot is held for the window and this much more: a request admitted early in the window may
# reach the API a little later than it was admitted, and the API counts arrivals.
ARRIVAL_MARGIN = 1.0
_PAUSE_BOUNDS = (1.0, 900.0)
_RATELIMIT_T = re.compile(r"(?:^|;)\s*t=(\d+(?:\.\d+)?)")

logger = logging.getLogger("consumers.workflows.client")

ON_DEMAND = "on_demand"
WATCHDOG = "watchdog"
OTHER = "other"
STALL = "stall"  # the watchdog's step reads for stalled audits
ORPHANS = "orphans"  # the sweep for instances no audit knows
TERMINATE = "terminate"  # terminations of stalled instances
# How a refusal for a spender's share begins (status reads tell it apart by this).
SHARE_SPENT = "share of the probe budget spent"
# What a refusal for the watchdog's floor says (likewise).
FLOOR_KEPT = "the rest of the window is the watchdog's floor"


class Limiter(Protocol):
    """Admits requests within a budget and holds them during a 429 pause.

    ``take(wait, spender)`` admits one request of ``spender``, waiting up to ``wait`` seconds
    for a free slot or for a pause to end (a short pause is waited out by the requests queued
    behind it); it answers ``None`` when admitted, else why not (``rate_limited``)."""

    async def take(self, wait: float, spender: str = OTHER) -> str | None: ...

    async def pause(self, seconds: float) -> float: ...

    async def paused_for(self) -> float | None: ...

    async def budget_left(self) -> int: ...

    async def room(self, spender: str) -> int:
        """Requests ``spender`` could take now without waiting (0 during a pause)."""
        ...


def _clamp(seconds: float) -> float:
    return min(max(seconds, _PAUSE_BOUNDS[0]), _PAUSE_BOUNDS[1])


def _paused(left: float) -> str:
    return f"probing paused by a Cloudflare 429 for {left:.1f}s more"


class RateLimit:
    """One process's budget: ``budget`` requests per sliding ``window`` seconds, and the pause
    after a 429, in memory (every spender alike: no shares)."""

    def __init__(
        self,
        budget: int,
        window: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        self._budget = budget
        self._window = window
        self._clock = clock
        self._sleep = sleep
        self._sent: deque[float] = deque()
        self._paused_until: float | None = None

    async def budget_left(self) -> int:
        """Requests that may be sent now without waiting for the window."""
        self._prune(self._clock())
        return self._budget - len(self._sent)

    async def room(self, spender: str) -> int:
        return 0 if await self.paused_for() is not None else await self.budget_left()

    @property
    def paused_until(self) -> float | None:
        """The ``clock()`` reading at which a 429 pause ends; ``None`` when not paused."""
        if self._paused_until is not None and self._paused_until > self._clock():
            return self._paused_until
        return None

    async def paused_for(self) -> float | None:
        until = self.paused_until
        return None if until is None else until - self._clock()

    async def take(self, wait: float, spender: str = OTHER) -> str | None:
        deadline = self._clock() + wait
        while True:
            now = self._clock()
            left = await self.paused_for()
            if left is not None:
                if now + left > deadline:
                    return _paused(left)
                await self._sleep(left)
                continue
            self._prune(now)
            if len(self._sent) < self._budget:
                self._sent.append(now)
                return None
            frees_at = self._sent[0] + self._window
            if frees_at > deadline:
                return "local request budget exhausted"
            await self._sleep(frees_at - now)

    async def pause(self, seconds: float) -> float:
        """Pause every request for ``seconds`` (clamped to 1 s .. 15 min); the seconds used."""
        seconds = _clamp(seconds)
        until = self._clock() + seconds
        if self._paused_until is None or until > self._paused_until:
            self._paused_until = until
        logger.warning("Workflows API rate limit (429): probing paused for %.0fs", seconds)
        return seconds

    def _prune(self, now: float) -> None:
        horizon = now - self._window
        while self._sent and self._sent[0] <= horizon:
            self._sent.popleft()


class SharedRateLimit:
    """The budget and the 429 pause of one Cloudflare account, shared by every process that
    probes through it: both live in the store (wall-clock time, as processes share no other).
    ``floor``: the part of each window reserved for the watchdog (every other spender together
    takes at most the rest); ``shares``: the part of each window a spender may take at most,
    within what the floor leaves (a spender not named there may take whatever is free)."""

    def __init__(
        self,
        store: RequestBudget,
        account: str,
        budget: int,
        window: float,
        *,
        shares: Mapping[str, float] | None = None,
        floor: float = 0.0,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        self._store = store
        self._account = account
        self._budget = budget
        self._window = window + ARRIVAL_MARGIN
        self._reserve = reserve_of(budget, floor)
        self._shares = {
            s: min(share_of(budget, f), budget - self._reserve) for s, f in (shares or {}).items()
        }
        self._clock = clock
        self._sleep = sleep

    @property
    def window(self) -> float:
        """The window slots are held for (the budget's window and the arrival margin)."""
        return self._window

    async def share_left(self, spender: str) -> int | None:
        """Requests ``spender`` may still take in this window by its share (``None``: it has
        no share of its own); the budget as a whole may hold it back sooner."""
        cap = self._shares.get(spender)
        if cap is None:
            return None
        used = await self._store.requests_in_window(
            self._account, self._clock(), self._window, spender=spender
        )
        return max(cap - used, 0)

    async def budget_left(self) -> int:
        used = await self._store.requests_in_window(self._account, self._clock(), self._window)
        return max(self._budget - used, 0)

    async def room(self, spender: str) -> int:
        """What :meth:`take` would grant ``spender`` now without waiting: the free slots,
        less what is left of the watchdog's floor (for every other spender), within the
        spender's share; 0 during a pause. (Others may take them first.)"""
        if await self.paused_for() is not None:
            return 0
        now, store, account = self._clock(), self._store, self._account
        free = self._budget - await store.requests_in_window(account, now, self._window)
        if spender != WATCHDOG and self._reserve:
            kept = await store.requests_in_window(account, now, self._window, spender=WATCHDOG)
            free -= max(self._reserve - kept, 0)
        cap = self._shares.get(spender)
        if cap is not None:
            spent = await store.requests_in_window(account, now, self._window, spender=spender)
            free = min(free, cap - spent)
        return max(free, 0)

    async def paused_for(self) -> float | None:
        now = self._clock()
        until = await self._store.requests_paused_until(self._account, now)
        return None if until is None else (until - now).total_seconds()

    async def take(self, wait: float, spender: str = OTHER) -> str | None:
        deadline = self._clock() + timedelta(seconds=wait)
        share = self._shares.get(spender)
        while True:
            now = self._clock()
            slot = await self._store.take_request_slot(
                self._account,
                now,
                self._budget,
                self._window,
                spender=spender,
                share=share,
                reserve=self._reserve,
                reserved_for=WATCHDOG,
            )
            if slot.granted:
                return None
            ready_at = slot.paused_until or slot.frees_at or now
            if ready_at > deadline:
                if slot.paused_until is not None:
                    return _paused((slot.paused_until - now).total_seconds())
                if slot.share_spent:
                    return (
                        f"{spender} {SHARE_SPENT}: {share} of {self._budget} requests per "
                        "window, the rest kept for the watchdog and others"
                    )
                if slot.reserved:
                    return (
                        f"request budget exhausted for {spender}: {FLOOR_KEPT} "
                        f"({self._reserve} of {self._budget} requests, "
                        "AUDITREC_WATCHDOG_BUDGET_FLOOR)"
                    )
                return "request budget exhausted (shared by every process probing this account)"
            await self._sleep(max((ready_at - now).total_seconds(), 0.001))

    async def pause(self, seconds: float) -> float:
        seconds = _clamp(seconds)
        await self._store.pause_requests(self._account, self._clock() + timedelta(seconds=seconds))
        logger.warning("Workflows API rate limit (429): probing paused for %.0fs", seconds)
        return seconds


def seconds_from_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    return max(seconds, 0.0) if seconds == seconds else None  # NaN guard


def rate_limit_pause(headers: httpx.Headers) -> float:
    """Seconds a 429 asks for: retry-after, Ratelimit ``t=``, X-RateLimit-Reset, else 60."""
    seconds = seconds_from_retry_after(headers.get("retry-after"))
    if seconds is not None:
        return seconds
    if m := _RATELIMIT_T.search(headers.get("ratelimit", "")):
        return float(m[1])
    reset = headers.get("x-ratelimit-reset", "").strip()
    if reset.replace(".", "", 1).isdigit():
        value = float(reset)
        return value - time.time() if value > 1_000_000_000 else value  # epoch or delta
    return _DEFAULT_PAUSE
