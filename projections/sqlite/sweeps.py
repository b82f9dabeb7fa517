"""Watchdog sweeps awaiting the brake's verdict in SQLite (see the port). Writes are one
``BEGIN IMMEDIATE`` transaction each, so processes sharing the file serialise on its write
lock.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta

from projections.sqlite.connection import SQLiteDB
from projections.sqlite.rows import from_micros, to_micros
from projections.sweeps import Sweeps
from projections.values import OpenSweep

__all__ = ["SQLiteSweeps"]

KEEP_SWEEPS = timedelta(days=7)  # judged sweeps are kept this long, then pruned


class SQLiteSweeps(Sweeps):
    def __init__(self, db: SQLiteDB) -> None:
        self.db = db

    async def open_sweep(
        self, sweep_id: str, requests: Sequence[str], at: datetime, deadline: datetime
    ) -> None:
        def work() -> None:
            with self.db.transaction() as conn:
                conn.execute(
                    "INSERT OR IGNORE INTO sweeps (sweep_id, requests, at, deadline) "
                    "VALUES (?, ?, ?, ?)",
                    (sweep_id, json.dumps(list(requests)), to_micros(at), to_micros(deadline)),
                )
                conn.execute(
                    "DELETE FROM sweeps WHERE verdict IS NOT NULL AND judged_at < ?",
                    (to_micros(at - KEEP_SWEEPS),),
                )

        await self.db.run(work)

    async def open_sweeps(self) -> list[OpenSweep]:
        def work() -> list[OpenSweep]:
            cur = self.db.conn.execute(
                "SELECT sweep_id, requests, at, deadline FROM sweeps "
                "WHERE verdict IS NULL ORDER BY at, sweep_id"
            )
            out = []
            for sweep_id, requests, at, deadline in cur:
                start, end = from_micros(at), from_micros(deadline)
                assert start is not None and end is not None
                out.append(OpenSweep(sweep_id, tuple(json.loads(requests)), start, end))
            return out

        return await self.db.run(work)

    async def claim_sweep(self, sweep_id: str, owner: str, now: datetime, lease_s: float) -> bool:
        def work() -> bool:
            with self.db.transaction() as conn:
                cur = conn.execute(
                    "UPDATE sweeps SET claimed_by = ?, claimed_until = ? "
                    "WHERE sweep_id = ? AND verdict IS NULL "
                    "AND (claimed_until IS NULL OR claimed_until < ? OR claimed_by = ?)",
                    (
                        owner,
                        to_micros(now + timedelta(seconds=lease_s)),
                        sweep_id,
                        to_micros(now),
                        owner,
                    ),
                )
                return cur.rowcount == 1

        return await self.db.run(work)

    async def close_sweep(
        self, sweep_id: str, verdict: str, lost: int, observations: int, now: datetime
    ) -> None:
        def work() -> None:
            with self.db.transaction() as conn:
                conn.execute(
                    "UPDATE sweeps SET verdict = ?, lost = ?, observations = ?, judged_at = ? "
                    "WHERE sweep_id = ?",
                    (verdict, lost, observations, to_micros(now), sweep_id),
                )

        await self.db.run(work)
