"""Retriable outages, logged once per change of state: a WARNING when one begins (or its
cause changes), naming the error class, an INFO when it ends with how long it lasted and how
many attempts failed, and DEBUG for every retry in between. A broker that is down for a minute
is two lines, not one per retry and component. :func:`retrying` retries an attempt through
one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

__all__ = ["Outage", "retrying"]


class Outage:
    def __init__(self, what: str, logger: Any = None, **context: Any) -> None:
        self.what = what
        self.log = logger or structlog.get_logger("auditrec")
        self.context = context
        self.cause: str | None = None
        self.since = 0.0
        self.failures = 0

    @property
    def ongoing(self) -> bool:
        return self.cause is not None

    def failed(self, exc: BaseException, **extra: Any) -> None:
        cause = type(exc).__name__
        error = str(exc)[:300]
        self.failures += 1
        if cause == self.cause:
            self.log.debug(f"{self.what}: still failing", error=error, **self.context, **extra)
            return
        if self.cause is None:
            self.since = time.monotonic()
        self.cause = cause
        self.log.warning(
            f"{self.what}: unavailable; retrying",
            error_class=cause,
            error=error,
            **self.context,
            **extra,
        )

    def recovered(self) -> None:
        if self.cause is None:
            return
        self.log.info(
            f"{self.what}: recovered",
            after_s=round(time.monotonic() - self.since, 1),
            failures=self.failures,
            **self.context,
        )
        self.cause, self.failures = None, 0


async def retrying(
    attempt: Callable[[], Awaitable[None]],
    undo: Callable[[], Awaitable[None]],
    *,
    wait: float,
    what: str,
) -> None:
    """Run ``attempt``; on a retriable failure ``undo`` what it did and try again with
    bounded backoff until ``wait`` seconds have passed (0: one attempt)."""
    deadline = time.monotonic() + wait
    backoff = 0.5
    outage = Outage(what)
    while True:
        try:
            await attempt()
            outage.recovered()
            return
        except Exception as exc:
            await undo()
            if not getattr(exc, "retriable", False) or time.monotonic() + backoff > deadline:
                raise
            outage.failed(exc, retry_in=backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 10.0)
