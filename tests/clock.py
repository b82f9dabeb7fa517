"""A fake monotonic clock with its own sleep, for code that takes ``clock`` and ``sleep``."""

from __future__ import annotations

import asyncio

__all__ = ["FakeClock"]


class FakeClock:
    """Time moves only when a test :meth:`advance`\\ s it or when something sleeps on it.

    ``await clock.sleep(s)`` lets the other tasks run once, then moves the clock to the
    sleeper's wake-up time (unless it is already past it) and returns: no real waiting.
    Sleepers wake in the order they slept. ``sleeps`` records every requested duration.
    """

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        wake = self.now + seconds
        await asyncio.sleep(0)
        self.now = max(self.now, wake)
