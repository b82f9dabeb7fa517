"""The mass-failure brake's shared state in SQLite (see the port): sweeps awaiting a verdict,
the brake itself, and the audits whose decisions it holds. Writes are one ``BEGIN IMMEDIATE``
transaction each, so processes sharing the file serialise on its write lock."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta

from projections.row import AuditRow
from projections.sqlite.connection import SQLiteDB
from projections.sqlite.rows import SELECT_ROWS, decode_row, from_micros, to_micros
from projections.values import BrakeState, OpenSweep

__all__ = ["KEEP_SWEEPS", "SQLiteBrake"]

KEEP_SWEEPS = timedelta(days=7)  # judged sweeps are kept this long, then pruned
_NAME = "instance_lost"


class SQLiteBrake:
    db: SQLiteDB

    async def held_audits(self, limit: int | None = None) -> list[AuditRow]:
        def work() -> list[AuditRow]:
            cur = self.db.conn.execute(
                f"{SELECT_ROWS} WHERE held_decision_id IS NOT NULL AND status = 'running' "
                "ORDER BY held_at, audit_id LIMIT ?",
                (-1 if limit is None else limit,),
            )
            return [decode_row(values) for values in cur]

        return await self.db.run(work)

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

    async def brake(self) -> BrakeState:
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
        before = await self.brake()

        def work() -> None:
            with self.db.transaction() as conn:
                conn.execute(
                    "UPDATE brake SET engaged = 0, ended_at = ?, ended_by = ?, how = ? "
                    "WHERE name = ? AND engaged = 1",
                    (to_micros(at), actor, how, _NAME),
                )

        await self.db.run(work)
        return before
