"""Coordination in SQLite (see the port): the watchdog's lock, a lease row with an expiry
(SQLite has no advisory locks), the processes' heartbeats, and the telemetry already sent."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import datetime

from projections.sqlite.connection import SQLiteDB
from projections.sqlite.rows import chunks, to_micros

__all__ = ["SQLiteCoordination"]


class SQLiteCoordination:
    db: SQLiteDB
    owner: str
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

    async def telemetry_sent(self, event_ids: Iterable[str]) -> set[str]:
        ids = list(event_ids)

        def work() -> set[str]:
            out: set[str] = set()
            for chunk in chunks(ids):
                marks = ", ".join("?" for _ in chunk)
                cur = self.db.conn.execute(
                    f"SELECT event_id FROM telemetry_sent WHERE event_id IN ({marks})", chunk
                )
                out.update(r[0] for r in cur)
            return out

        return await self.db.run(work)

    async def mark_telemetry_sent(self, event_id: str, at: datetime) -> None:
        await self.db.run(
            lambda: self.db.conn.execute(
                "INSERT OR IGNORE INTO telemetry_sent VALUES (?, ?)", (event_id, to_micros(at))
            )
        )
