"""What keeps the probe within Cloudflare's limits: a request budget over a sliding window,
the pause a 429 asks for, and reading how long that pause is from the answer's headers.

Time is ``clock()`` (monotonic seconds) and waiting is ``sleep()``; tests pass a fake pair.
"""

from __future__ import annotations

import logging
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

__all__ = ["RateLimit", "rate_limit_pause", "seconds_from_retry_after"]

_DEFAULT_PAUSE = 60.0
_PAUSE_BOUNDS = (1.0, 900.0)
_RATELIMIT_T = re.compile(r"(?:^|;)\s*t=(\d+(?:\.\d+)?)")

logger = logging.getLogger("consumers.workflows.client")


class RateLimit:
    """``budget`` requests per sliding ``window`` seconds, and the pause after a 429."""

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

    @property
    def budget_left(self) -> int:
        """Requests that may be sent now without waiting for the window."""
        self._prune(self._clock())
        return self._budget - len(self._sent)

    @property
    def paused_until(self) -> float | None:
        """The ``clock()`` reading at which a 429 pause ends; ``None`` when not paused."""
        if self._paused_until is not None and self._paused_until > self._clock():
            return self._paused_until
        return None

    def paused_for(self) -> float | None:
        """Seconds left of a 429 pause; ``None`` when not paused."""
        until = self.paused_until
        return None if until is None else until - self._clock()

    async def take(self, wait: float) -> str | None:
        """Record one request in the window, waiting at most ``wait`` seconds for a free slot;
        ``None`` when taken, else why not."""
        deadline = self._clock() + wait
        while True:
            left = self.paused_for()
            if left is not None:
                return f"probing paused by a Cloudflare 429 for {left:.1f}s more"
            now = self._clock()
            self._prune(now)
            if len(self._sent) < self._budget:
                self._sent.append(now)
                return None
            frees_at = self._sent[0] + self._window
            if frees_at > deadline:
                return "local request budget exhausted"
            await self._sleep(frees_at - now)

    def pause(self, seconds: float) -> float:
        """Pause every request for ``seconds`` (clamped to 1 s .. 15 min); the seconds used."""
        seconds = min(max(seconds, _PAUSE_BOUNDS[0]), _PAUSE_BOUNDS[1])
        until = self._clock() + seconds
        if self._paused_until is None or until > self._paused_until:
            self._paused_until = until
        logger.warning("Workflows API rate limit (429): probing paused for %.0fs", seconds)
        return seconds

    def _prune(self, now: float) -> None:
        horizon = now - self._window
        while self._sent and self._sent[0] <= horizon:
            self._sent.popleft()


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
