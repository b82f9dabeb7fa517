"""Change notifications in PostgreSQL: the projector's write ends with ``pg_notify`` on the
schema's channel (delivered when its transaction commits), and a reader waiting for an outcome
wakes on it (``LISTEN`` on one connection of its own) instead of polling. When the listening
connection cannot be had, waiting falls back to a short sleep, and it is opened again later."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

__all__ = ["ChangeFeed", "channel_of"]

RETRY_AFTER = 5.0  # seconds before a listener that could not connect is tried again
FALLBACK_POLL = 0.005


def channel_of(schema: str) -> str:
    return f"auditrec_applied_{schema}"


class ChangeFeed:
    def __init__(self, connect: Callable[[], Awaitable[asyncpg.Connection]], channel: str) -> None:
        self._connect = connect
        self.channel = channel
        self._conn: asyncpg.Connection | None = None
        self._event = asyncio.Event()
        self._lock = asyncio.Lock()
        self._failed_at = -RETRY_AFTER

    async def wait(self, timeout: float) -> None:
        """Return on the next notification, or after ``timeout`` seconds."""
        if not await self._listening():
            await asyncio.sleep(min(timeout, FALLBACK_POLL))
            return
        event = self._event
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)

    async def _listening(self) -> bool:
        if self._conn is not None and not self._conn.is_closed():
            return True
        if time.monotonic() - self._failed_at < RETRY_AFTER:
            return False
        async with self._lock:
            if self._conn is not None and not self._conn.is_closed():
                return True
            try:
                conn = await self._connect()
                await conn.add_listener(self.channel, self._notified)
                conn.add_termination_listener(self._lost)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
                self._failed_at = time.monotonic()
                return False
            self._conn = conn
            return True

    def _notified(self, *_: Any) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()  # wakes every current waiter; later waiters wait for the next one

    def _lost(self, *_: Any) -> None:
        self._conn = None
        self._notified()  # waiters look again (and fall back to polling until reconnected)

    async def stop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        with contextlib.suppress(Exception):
            await asyncio.wait_for(conn.close(), timeout=5)
