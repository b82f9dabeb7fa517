"""Coordination in SQLite (see the port): the watchdog's lock, a lease row with an expiry
(SQLite has no advisory locks), the processes' heartbeats, and periodic jobs claimed once per
interval slot. Each write is one statement or one ``BEGIN IMMEDIATE`` transaction, so
processes sharing the file serialise on its write lock.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime

from projections.coordination import Coordination
from projections.sqlite.connection import SQLiteDB
from projections.sqlite.rows import to_micros

__all__ = ["SQLiteCoordination"]

KEEP_TICKS = 1000  # claimed slots kept per job (older ones are pruned at each claim)


class SQLiteCoordination(Coordination):
    def __init__(self, db: SQLiteDB, owner: str) -> None:
        self.db = db
        self.owner = owner
        """This store's name on the leases it takes (host, process, a random part)."""

    @contextlib.asynccontextmanager
    async def watchdog_lock(self) -> AsyncIterator[bool]:
        def take() -> bool:
            now = time.time()
            with self.db.transaction() as conn:
                row = conn.execute(
                    "SELECT owner, expires_at FROM locks WHERE name = 'watchdog'"
                ).fetchone()
                if row is not None and row[0] != self.owner and row[1] > now:
                    return False
                conn.execute(
                    "INSERT INTO locks VALUES ('watchdog', ?, ?) ON CONFLICT (name) DO UPDATE "
                    "SET owner = excluded.owner, expires_at = excluded.expires_at",
                    (self.owner, now + 300),
                )
                return True

        def release() -> None:
            self.db.conn.execute(
                "DELETE FROM locks WHERE name = 'watchdog' AND owner = ?", (self.owner,)
            )

        held = await self.db.run(take)
        try:
            yield held
        finally:
            if held:
                await self.db.run(release)

    async def heartbeat(self, process: str, components: Sequence[str], now: datetime) -> None:
        stamp = to_micros(now)

        def work() -> None:
            self.db.conn.executemany(
                "INSERT INTO processes VALUES (?, ?, ?) ON CONFLICT (process, component) "
                "DO UPDATE SET last_seen = excluded.last_seen",
                [(process, c, stamp) for c in components],
            )

        await self.db.run(work)

    async def live_components(self, since: datetime) -> dict[str, list[str]]:
        def work() -> dict[str, list[str]]:
            out: dict[str, list[str]] = {}
            cur = self.db.conn.execute(
                "SELECT component, process FROM processes WHERE last_seen >= ?",
                (to_micros(since),),
            )
            for component, process in cur:
                out.setdefault(component, []).append(process)
            return out

        return await self.db.run(work)

    async def forget_process(self, process: str) -> None:
        await self.db.run(
            lambda: self.db.conn.execute("DELETE FROM processes WHERE process = ?", (process,))
        )

    async def claim_tick(self, name: str, slot: int, owner: str) -> bool:
        def work() -> bool:
            with self.db.transaction() as conn:
                cur = conn.execute(
                    "INSERT OR IGNORE INTO ticks VALUES (?, ?, ?, ?)",
                    (name, slot, owner, to_micros(datetime.now(UTC))),
                )
                conn.execute(
                    "DELETE FROM ticks WHERE name = ? AND slot < ?", (name, slot - KEEP_TICKS)
                )
                return cur.rowcount == 1

        return await self.db.run(work)

    async def session_generation(self, name: str) -> int:
        def work() -> int:
            row = self.db.conn.execute(
                "SELECT generation FROM console_sessions WHERE name = ?", (name,)
            ).fetchone()
            return int(row[0]) if row is not None else 0

        return await self.db.run(work)

    async def end_sessions(self, name: str, now: datetime) -> int:
        def work() -> int:
            with self.db.transaction() as conn:
                row = conn.execute(
                    "INSERT INTO console_sessions VALUES (?, 1, ?) ON CONFLICT (name) DO UPDATE "
                    "SET generation = generation + 1, ended_at = excluded.ended_at "
                    "RETURNING generation",
                    (name, to_micros(now)),
                ).fetchone()
                return int(row[0])

        return await self.db.run(work)
