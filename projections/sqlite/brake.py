"""The mass-failure brake in SQLite (see the port): the brake itself, and the audits whose
decisions it holds. Writes are one ``BEGIN IMMEDIATE`` transaction each, so processes sharing
the file serialise on its write lock.
"""

from __future__ import annotations

from datetime import datetime

from projections.brake import BrakeStore
from projections.row import AuditRow
from projections.sqlite.connection import SQLiteDB
from projections.sqlite.rows import SELECT_ROWS, decode_row, from_micros, to_micros
from projections.values import BrakeState

__all__ = ["SQLiteBrake"]

_NAME = "instance_lost"


class SQLiteBrake(BrakeStore):
    def __init__(self, db: SQLiteDB) -> None:
        self.db = db

    async def state(self) -> BrakeState:
        def work() -> BrakeState:
            row = self.db.conn.execute(
                "SELECT engaged, since, sweep_id, lost, observations, ended_at, ended_by, how "
                "FROM brake WHERE name = ?",
                (_NAME,),
            ).fetchone()
            if row is None:
                return BrakeState()
            engaged, since, sweep_id, lost, observations, ended_at, ended_by, how = row
            return BrakeState(
                bool(engaged),
                from_micros(since),
                sweep_id,
                lost,
                observations,
                from_micros(ended_at),
                ended_by,
                how,
            )

        return await self.db.run(work)

    async def engage_brake(self, sweep_id: str, lost: int, observations: int, at: datetime) -> bool:
        def work() -> bool:
            with self.db.transaction() as conn:
                row = conn.execute("SELECT engaged FROM brake WHERE name = ?", (_NAME,)).fetchone()
                if row is not None and row[0]:
                    return False
                conn.execute(
                    "INSERT INTO brake (name, engaged, since, sweep_id, lost, observations) "
                    "VALUES (?, 1, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET engaged = 1, "
                    "since = excluded.since, sweep_id = excluded.sweep_id, "
                    "lost = excluded.lost, observations = excluded.observations",
                    (_NAME, to_micros(at), sweep_id, lost, observations),
                )
                return True

        return await self.db.run(work)

    async def end_brake(self, how: str, actor: str, at: datetime) -> BrakeState:
        before = await self.state()

        def work() -> None:
            with self.db.transaction() as conn:
                conn.execute(
                    "UPDATE brake SET engaged = 0, ended_at = ?, ended_by = ?, how = ? "
                    "WHERE name = ? AND engaged = 1",
                    (to_micros(at), actor, how, _NAME),
                )

        await self.db.run(work)
        return before

    async def held_audits(self, limit: int | None = None) -> list[AuditRow]:
        def work() -> list[AuditRow]:
            cur = self.db.conn.execute(
                f"{SELECT_ROWS} WHERE held_decision_id IS NOT NULL AND status = 'running' "
                "ORDER BY held_at, audit_id LIMIT ?",
                (-1 if limit is None else limit,),
            )
            return [decode_row(values) for values in cur]

        return await self.db.run(work)
