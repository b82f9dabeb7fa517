"""The mass-failure brake in PostgreSQL (see the port): the brake itself, and the audits whose
decisions it holds. Engaging is a single conditional statement, so concurrent processes agree
without locks.
"""

from __future__ import annotations

from datetime import datetime

from projections.brake import BrakeStore
from projections.postgres.connection import PostgresDB
from projections.postgres.rows import SELECT_ROWS, decode_row
from projections.row import AuditRow
from projections.values import BrakeState

__all__ = ["PostgresBrake"]

_NAME = "instance_lost"


class PostgresBrake(BrakeStore):
    def __init__(self, db: PostgresDB) -> None:
        self.db = db

    async def state(self) -> BrakeState:
        with self.db.errors("read the brake"):
            rec = await self.db.pool.fetchrow(
                "SELECT engaged, since, sweep_id, lost, observations, ended_at, ended_by, how "
                "FROM brake WHERE name = $1",
                _NAME,
            )
        return BrakeState(*rec) if rec is not None else BrakeState()

    async def engage_brake(self, sweep_id: str, lost: int, observations: int, at: datetime) -> bool:
        with self.db.errors("engage the brake"):
            engaged = await self.db.pool.fetchval(
                "INSERT INTO brake (name, engaged, since, sweep_id, lost, observations) "
                "VALUES ($1, true, $2, $3, $4, $5) ON CONFLICT (name) DO UPDATE SET "
                "engaged = true, since = excluded.since, sweep_id = excluded.sweep_id, "
                "lost = excluded.lost, observations = excluded.observations "
                "WHERE NOT brake.engaged RETURNING true",
                _NAME,
                at,
                sweep_id,
                lost,
                observations,
            )
        return bool(engaged)

    async def end_brake(self, how: str, actor: str, at: datetime) -> BrakeState:
        with self.db.errors("end the brake"):
            async with self.db.pool.acquire() as conn, conn.transaction():
                rec = await conn.fetchrow(
                    "SELECT engaged, since, sweep_id, lost, observations, ended_at, ended_by, "
                    "how FROM brake WHERE name = $1 FOR UPDATE",
                    _NAME,
                )
                await conn.execute(
                    "UPDATE brake SET engaged = false, ended_at = $2, ended_by = $3, how = $4 "
                    "WHERE name = $1 AND engaged",
                    _NAME,
                    at,
                    actor,
                    how,
                )
        return BrakeState(*rec) if rec is not None else BrakeState()

    async def held_audits(self, limit: int | None = None) -> list[AuditRow]:
        with self.db.errors("list held decisions"):
            recs = await self.db.pool.fetch(
                f"{SELECT_ROWS} WHERE held_decision_id IS NOT NULL AND status = 'running' "
                "ORDER BY held_at, audit_id LIMIT $1",
                limit,
            )
        return [decode_row(r) for r in recs]
