"""Coordination between processes in PostgreSQL, the second half of
:class:`~projections.postgres.store.PostgresStore`: the watchdog lock, process heartbeats and
the telemetry bookkeeping, plus the advisory-lock keys and event-id handling they need.

The watchdog lock is a session advisory lock (``pg_try_advisory_lock``) on a connection held
for the tick. Event ids are ``uuid``: a string that is not a UUID matches nothing, and marking
one as sent is a non-retriable error.
"""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import datetime
from typing import Any

import asyncpg

from statemachine.errors import StoreError

__all__ = ["PostgresCoordination", "advisory_key", "event_uuids"]


def advisory_key(purpose: str, schema: str) -> int:
    """The advisory-lock key for ``purpose`` in ``schema``: each deployment has its own."""
    digest = hashlib.blake2b(f"auditrec:{purpose}:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def event_uuids(values: Iterable[Any]) -> list[uuid.UUID]:
    """The values that are UUIDs, as UUIDs; the others are dropped (they match nothing)."""
    out = []
    for value in values:
        if isinstance(value, uuid.UUID):
            out.append(value)
            continue
        try:
            out.append(uuid.UUID(str(value)))
        except ValueError:
            continue  # not an event id: matches nothing
    return out


def _terminate(conn: asyncpg.Connection) -> None:
    with contextlib.suppress(Exception):  # a connection the pool already dropped
        conn.terminate()


class PostgresCoordination(ABC):
    """The store's coordination methods; the store provides its pool, its error translation
    and the watchdog's lock key."""

    watchdog_key: int

    @property
    @abstractmethod
    def pool(self) -> asyncpg.Pool: ...

    @abstractmethod
    def _errors(self, what: str) -> contextlib.AbstractContextManager[None]: ...

    @contextlib.asynccontextmanager
    async def watchdog_lock(self) -> AsyncIterator[bool]:
        with self._errors("take the watchdog lock"):
            conn = await self.pool.acquire()
        held = False
        try:
            with self._errors("take the watchdog lock"):
                held = bool(
                    await conn.fetchval("SELECT pg_try_advisory_lock($1)", self.watchdog_key)
                )
            yield held
        finally:
            try:
                if held:
                    await conn.fetchval("SELECT pg_advisory_unlock($1)", self.watchdog_key)
            except Exception:
                _terminate(conn)  # whatever went wrong, ending the session releases its locks
            except BaseException:
                _terminate(conn)
                raise
            finally:
                # A session the server ended is already back in the pool.
                with contextlib.suppress(Exception):
                    await self.pool.release(conn)

    async def heartbeat(self, process: str, components: Sequence[str], now: datetime) -> None:
        if not components:
            return
        with self._errors("heartbeat"):
            await self.pool.execute(
                "INSERT INTO processes (process, component, last_seen) "
                "SELECT $1, c, $3 FROM unnest($2::text[]) AS c "
                "ON CONFLICT (process, component) DO UPDATE SET last_seen = excluded.last_seen",
                process,
                list(dict.fromkeys(components)),
                now,
            )

    async def live_components(self, since: datetime) -> dict[str, list[str]]:
        with self._errors("read live components"):
            recs = await self.pool.fetch(
                "SELECT component, process FROM processes WHERE last_seen >= $1 "
                "ORDER BY component, process",
                since,
            )
        out: dict[str, list[str]] = {}
        for component, process in recs:
            out.setdefault(component, []).append(process)
        return out

    async def forget_process(self, process: str) -> None:
        with self._errors("forget process"):
            await self.pool.execute("DELETE FROM processes WHERE process = $1", process)

    # -- telemetry bookkeeping ------------------------------------------------------------

    async def telemetry_sent(self, event_ids: Iterable[str]) -> set[str]:
        asked: dict[uuid.UUID, set[str]] = {}
        for raw in event_ids:
            for key in event_uuids([raw]):
                asked.setdefault(key, set()).add(raw)
        if not asked:
            return set()
        with self._errors("read sent telemetry"):
            recs = await self.pool.fetch(
                "SELECT event_id FROM telemetry_sent WHERE event_id = ANY($1::uuid[])",
                list(asked),
            )
        return {raw for r in recs for raw in asked[r[0]]}

    async def mark_telemetry_sent(self, event_id: str, at: datetime) -> None:
        try:
            key = uuid.UUID(str(event_id))
        except ValueError:
            raise StoreError(
                f"telemetry event id {event_id!r} is not a UUID", retriable=False
            ) from None
        with self._errors("mark telemetry sent"):
            await self.pool.execute(
                "INSERT INTO telemetry_sent (event_id, sent_at) VALUES ($1, $2) "
                "ON CONFLICT (event_id) DO NOTHING",
                key,
                at,
            )
