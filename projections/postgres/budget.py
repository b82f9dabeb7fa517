"""The Workflows API's request budget and 429 pause in PostgreSQL (see the port). Taking a
request serialises per account on a transaction-level advisory lock, so concurrent processes
never overspend the window.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from projections.budget import RequestBudget
from projections.postgres.connection import PostgresDB, advisory_key
from projections.values import RequestSlot

__all__ = ["PostgresBudget"]


class PostgresBudget(RequestBudget):
    def __init__(self, db: PostgresDB) -> None:
        self.db = db

    async def take_request_slot(
        self,
        account: str,
        now: datetime,
        budget: int,
        window_s: float,
        *,
        spender: str = "other",
        share: int | None = None,
        reserve: int = 0,
        reserved_for: str = "watchdog",
    ) -> RequestSlot:
        horizon = now - timedelta(seconds=window_s)
        with self.db.errors("take a Workflows API request slot"):
            async with self.db.pool.acquire() as conn, conn.transaction():
                await conn.execute(
                    "SELECT pg_advisory_xact_lock($1)",
                    advisory_key(f"api:{account}", self.db.schema),
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
                count, oldest, newest, own, own_oldest, others, others_oldest = await conn.fetchrow(
                    "SELECT count(*), min(sent_at), max(sent_at), "
                    "count(*) FILTER (WHERE spender = $2), "
                    "min(sent_at) FILTER (WHERE spender = $2), "
                    "count(*) FILTER (WHERE spender <> $3), "
                    "min(sent_at) FILTER (WHERE spender <> $3) "
                    "FROM api_requests WHERE account = $1",
                    account,
                    spender,
                    reserved_for,
                )
                if share is not None and own >= share:
                    return RequestSlot(
                        False,
                        frees_at=(own_oldest or now) + timedelta(seconds=window_s),
                        share_spent=True,
                    )
                if reserve > 0 and spender != reserved_for and others >= budget - reserve:
                    return RequestSlot(
                        False,
                        frees_at=(others_oldest or now) + timedelta(seconds=window_s),
                        reserved=True,
                    )
                if count < budget:
                    # Never older than a slot already taken: a caller whose clock read came
                    # before another's lock must not free its slot early.
                    taken = max(now, newest or now)
                    await conn.execute(
                        "INSERT INTO api_requests (account, sent_at, spender) VALUES ($1, $2, $3)",
                        account,
                        taken,
                        spender,
                    )
                    return RequestSlot(True)
                return RequestSlot(False, frees_at=oldest + timedelta(seconds=window_s))

    async def pause_requests(self, account: str, until: datetime) -> None:
        with self.db.errors("pause Workflows API requests"):
            await self.db.pool.execute(
                "INSERT INTO api_pauses VALUES ($1, $2) ON CONFLICT (account) "
                "DO UPDATE SET until = greatest(api_pauses.until, excluded.until)",
                account,
                until,
            )

    async def requests_paused_until(self, account: str, now: datetime) -> datetime | None:
        with self.db.errors("read the Workflows API pause"):
            until: datetime | None = await self.db.pool.fetchval(
                "SELECT until FROM api_pauses WHERE account = $1 AND until > $2", account, now
            )
        return until

    async def requests_in_window(
        self, account: str, now: datetime, window_s: float, *, spender: str | None = None
    ) -> int:
        with self.db.errors("count Workflows API requests"):
            count = await self.db.pool.fetchval(
                "SELECT count(*) FROM api_requests WHERE account = $1 AND sent_at > $2 "
                "AND ($3::text IS NULL OR spender = $3)",
                account,
                now - timedelta(seconds=window_s),
                spender,
            )
        return int(count)
