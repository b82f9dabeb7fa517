"""Watchdog sweeps awaiting the brake's verdict in PostgreSQL (see the port). Claims are single
conditional statements, so concurrent processes agree without locks.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from projections.postgres.connection import PostgresDB
from projections.sweeps import Sweeps
from projections.values import OpenSweep

__all__ = ["PostgresSweeps"]

KEEP_SWEEPS = timedelta(days=7)  # judged sweeps are kept this long, then pruned


class PostgresSweeps(Sweeps):
    def __init__(self, db: PostgresDB) -> None:
        self.db = db

    async def open_sweep(
        self, sweep_id: str, requests: Sequence[str], at: datetime, deadline: datetime
    ) -> None:
        with self.db.errors("record a sweep"):
            async with self.db.pool.acquire() as conn, conn.transaction():
                await conn.execute(
                    "INSERT INTO sweeps (sweep_id, requests, at, deadline) "
                    "VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                    sweep_id,
                    list(requests),
                    at,
                    deadline,
                )
                await conn.execute(
                    "DELETE FROM sweeps WHERE verdict IS NOT NULL AND judged_at < $1",
                    at - KEEP_SWEEPS,
                )

    async def open_sweeps(self) -> list[OpenSweep]:
        with self.db.errors("read open sweeps"):
            recs = await self.db.pool.fetch(
                "SELECT sweep_id, requests, at, deadline FROM sweeps "
                "WHERE verdict IS NULL ORDER BY at, sweep_id"
            )
        return [OpenSweep(s, tuple(r), at, d) for s, r, at, d in recs]

    async def claim_sweep(self, sweep_id: str, owner: str, now: datetime, lease_s: float) -> bool:
        with self.db.errors("claim a sweep's verdict"):
            claimed = await self.db.pool.fetchval(
                "UPDATE sweeps SET claimed_by = $2, claimed_until = $3 "
                "WHERE sweep_id = $1 AND verdict IS NULL "
                "AND (claimed_until IS NULL OR claimed_until < $4 OR claimed_by = $2) "
                "RETURNING true",
                sweep_id,
                owner,
                now + timedelta(seconds=lease_s),
                now,
            )
        return bool(claimed)

    async def close_sweep(
        self, sweep_id: str, verdict: str, lost: int, observations: int, now: datetime
    ) -> None:
        with self.db.errors("record a sweep's verdict"):
            await self.db.pool.execute(
                "UPDATE sweeps SET verdict = $2, lost = $3, observations = $4, judged_at = $5 "
                "WHERE sweep_id = $1",
                sweep_id,
                verdict,
                lost,
                observations,
                now,
            )
