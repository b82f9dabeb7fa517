"""The mass-failure brake's shared state in PostgreSQL (see the port): sweeps awaiting a
verdict, the brake itself, and the audits whose decisions it holds. Claims and engagement are
single conditional statements, so concurrent processes agree without locks."""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime, timedelta

import asyncpg

from projections.postgres.rows import SELECT_ROWS, decode_row
from projections.row import AuditRow
from projections.values import BrakeState, OpenSweep

__all__ = ["KEEP_SWEEPS", "PostgresBrake"]

KEEP_SWEEPS = timedelta(days=7)  # judged sweeps are kept this long, then pruned
_NAME = "instance_lost"


class PostgresBrake(ABC):
    @property
    @abstractmethod
    def pool(self) -> asyncpg.Pool: ...

    @abstractmethod
    def _errors(self, what: str) -> contextlib.AbstractContextManager[None]: ...

    async def held_audits(self, limit: int | None = None) -> list[AuditRow]:
        with self._errors("list held decisions"):
            recs = await self.pool.fetch(
                f"{SELECT_ROWS} WHERE held_decision_id IS NOT NULL AND status = 'running' "
                "ORDER BY held_at, audit_id LIMIT $1",
                limit,
            )
        return [decode_row(r) for r in recs]

    async def open_sweep(
        self, sweep_id: str, requests: Sequence[str], at: datetime, deadline: datetime
    ) -> None:
        with self._errors("record a sweep"):
            async with self.pool.acquire() as conn, conn.transaction():
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
        with self._errors("read open sweeps"):
            recs = await self.pool.fetch(
                "SELECT sweep_id, requests, at, deadline FROM sweeps "
                "WHERE verdict IS NULL ORDER BY at, sweep_id"
            )
        return [OpenSweep(s, tuple(r), at, d) for s, r, at, d in recs]

    async def claim_sweep(self, sweep_id: str, owner: str, now: datetime, lease_s: float) -> bool:
        with self._errors("claim a sweep's verdict"):
            claimed = await self.pool.fetchval(
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
        with self._errors("record a sweep's verdict"):
            await self.pool.execute(
                "UPDATE sweeps SET verdict = $2, lost = $3, observations = $4, judged_at = $5 "
                "WHERE sweep_id = $1",
                sweep_id,
                verdict,
                lost,
                observations,
                now,
            )

    async def brake(self) -> BrakeState:
        with self._errors("read the brake"):
            rec = await self.pool.fetchrow(
                "SELECT engaged, since, sweep_id, lost, observations, ended_at, ended_by, how "
                "FROM brake WHERE name = $1",
                _NAME,
            )
        return BrakeState(*rec) if rec is not None else BrakeState()

    async def engage_brake(self, sweep_id: str, lost: int, observations: int, at: datetime) -> bool:
        with self._errors("engage the brake"):
            engaged = await self.pool.fetchval(
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
        with self._errors("end the brake"):
            async with self.pool.acquire() as conn, conn.transaction():
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
