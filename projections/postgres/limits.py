"""Shared pace in PostgreSQL (see the port): periodic jobs claimed once per interval slot, and
the Workflows API's request budget and 429 pause. Taking a request serialises per account on a
transaction-level advisory lock, so concurrent processes never overspend the window."""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from datetime import datetime, timedelta

import asyncpg

from projections.postgres.coordination import advisory_key
from projections.values import RequestSlot

__all__ = ["PostgresLimits"]

KEEP_TICKS = 1000  # claimed slots kept per job (older ones are pruned at each claim)


class PostgresLimits(ABC):
    schema: str

    @property
    @abstractmethod
    def pool(self) -> asyncpg.Pool: ...

    @abstractmethod
    def _errors(self, what: str) -> contextlib.AbstractContextManager[None]: ...

    async def claim_tick(self, name: str, slot: int, owner: str) -> bool:
        with self._errors("claim a tick"):
            async with self.pool.acquire() as conn, conn.transaction():
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

    async def take_request_slot(
        self, account: str, now: datetime, budget: int, window_s: float
    ) -> RequestSlot:
        horizon = now - timedelta(seconds=window_s)
        with self._errors("take a Workflows API request slot"):
            async with self.pool.acquire() as conn, conn.transaction():
                await conn.execute(
                    "SELECT pg_advisory_xact_lock($1)", advisory_key(f"api:{account}", self.schema)
                )
                until = await conn.fetchval(
                    "SELECT until FROM api_pauses WHERE account = $1", account
                )
                if until is not None and until > now:
                    return RequestSlot(False, paused_until=until)
                await conn.execute(
                    "DELETE FROM api_requests WHERE account = $1 AND sent_at <= $2",
                    account,
                    horizon,
                )
                count, oldest, newest = await conn.fetchrow(
                    "SELECT count(*), min(sent_at), max(sent_at) FROM api_requests "
                    "WHERE account = $1",
                    account,
                )
                if count < budget:
                    # Never older than a slot already taken: a caller whose clock read came
                    # before another's lock must not free its slot early.
                    taken = max(now, newest or now)
                    await conn.execute("INSERT INTO api_requests VALUES ($1, $2)", account, taken)
                    return RequestSlot(True)
                return RequestSlot(False, frees_at=oldest + timedelta(seconds=window_s))

    async def pause_requests(self, account: str, until: datetime) -> None:
        with self._errors("pause Workflows API requests"):
            await self.pool.execute(
                "INSERT INTO api_pauses VALUES ($1, $2) ON CONFLICT (account) "
                "DO UPDATE SET until = greatest(api_pauses.until, excluded.until)",
                account,
                until,
            )

    async def requests_paused_until(self, account: str, now: datetime) -> datetime | None:
        with self._errors("read the Workflows API pause"):
            until: datetime | None = await self.pool.fetchval(
                "SELECT until FROM api_pauses WHERE account = $1 AND until > $2", account, now
            )
        return until

    async def requests_in_window(self, account: str, now: datetime, window_s: float) -> int:
        with self._errors("count Workflows API requests"):
            count = await self.pool.fetchval(
                "SELECT count(*) FROM api_requests WHERE account = $1 AND sent_at > $2",
                account,
                now - timedelta(seconds=window_s),
            )
        return int(count)
