"""Coordination between processes in PostgreSQL (see the port): the watchdog lock, process
heartbeats and periodic jobs claimed once per interval slot.

The watchdog lock is a session advisory lock (``pg_try_advisory_lock``) on a connection held
for the tick; its key is derived from the schema, so each deployment has its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from datetime import datetime

import asyncpg

from projections.coordination import Coordination
from projections.postgres.connection import PostgresDB, advisory_key

__all__ = ["PostgresCoordination"]

KEEP_TICKS = 1000  # claimed slots kept per job (older ones are pruned at each claim)


def _terminate(conn: asyncpg.Connection) -> None:
    with contextlib.suppress(Exception):  # a connection the pool already dropped
        conn.terminate()


class PostgresCoordination(Coordination):
    def __init__(self, db: PostgresDB) -> None:
        self.db = db
        self.watchdog_key = advisory_key("watchdog", db.schema)

    @contextlib.asynccontextmanager
    async def watchdog_lock(self) -> AsyncIterator[bool]:
        with self.db.errors("take the watchdog lock"):
            conn = await self.db.pool.acquire()
        held = False
        try:
            with self.db.errors("take the watchdog lock"):
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
                    await self.db.pool.release(conn)

    async def heartbeat(self, process: str, components: Sequence[str], now: datetime) -> None:
        if not components:
            return
        with self.db.errors("heartbeat"):
            await self.db.pool.execute(
                "INSERT INTO processes (process, component, last_seen) "
                "SELECT $1, c, $3 FROM unnest($2::text[]) AS c "
                "ON CONFLICT (process, component) DO UPDATE SET last_seen = excluded.last_seen",
                process,
                list(dict.fromkeys(components)),
                now,
            )

    async def live_components(self, since: datetime) -> dict[str, list[str]]:
        with self.db.errors("read live components"):
            recs = await self.db.pool.fetch(
                "SELECT component, process FROM processes WHERE last_seen >= $1 "
                "ORDER BY component, process",
                since,
            )
        out: dict[str, list[str]] = {}
        for component, process in recs:
            out.setdefault(component, []).append(process)
        return out

    async def forget_process(self, process: str) -> None:
        with self.db.errors("forget process"):
            await self.db.pool.execute("DELETE FROM processes WHERE process = $1", process)

    async def claim_tick(self, name: str, slot: int, owner: str) -> bool:
        with self.db.errors("claim a tick"):
            async with self.db.pool.acquire() as conn, conn.transaction():
                claimed = await conn.fetchval(
                    "INSERT INTO ticks (name, slot, owner) VALUES ($1, $2, $3) "
                    "ON CONFLICT DO NOTHING RETURNING true",
                    name,
                    slot,
                    owner,
                )
                await conn.execute(
                    "DELETE FROM ticks WHERE name = $1 AND slot < $2", name, slot - KEEP_TICKS
                )
        return bool(claimed)

    async def session_generation(self, name: str) -> int:
        with self.db.errors("read a console session generation"):
            found = await self.db.pool.fetchval(
                "SELECT generation FROM console_sessions WHERE name = $1", name
            )
        return int(found) if found is not None else 0

    async def end_sessions(self, name: str, now: datetime) -> int:
        with self.db.errors("end console sessions"):
            generation = await self.db.pool.fetchval(
                "INSERT INTO console_sessions (name, generation, ended_at) VALUES ($1, 1, $2) "
                "ON CONFLICT (name) DO UPDATE SET generation = console_sessions.generation + 1, "
                "ended_at = excluded.ended_at RETURNING generation",
                name,
                now,
            )
        return int(generation)
