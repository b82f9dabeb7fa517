"""The Workflows API's request budget and 429 pause in SQLite (see the port). Taking a slot is
one ``BEGIN IMMEDIATE`` transaction, so processes sharing the file serialise on its write
lock and never overspend the window.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from projections.budget import RequestBudget
from projections.sqlite.connection import SQLiteDB
from projections.sqlite.rows import from_micros, to_micros
from projections.values import RequestSlot

__all__ = ["SQLiteBudget"]


class SQLiteBudget(RequestBudget):
    def __init__(self, db: SQLiteDB) -> None:
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
        stamp = to_micros(now)
        assert stamp is not None
        horizon = to_micros(now - timedelta(seconds=window_s))

        def work() -> RequestSlot:
            with self.db.transaction() as conn:
                row = conn.execute(
                    "SELECT until FROM api_pauses WHERE account = ?", (account,)
                ).fetchone()
                if row is not None and row[0] > stamp:
                    return RequestSlot(False, paused_until=from_micros(row[0]))
                conn.execute(
                    "DELETE FROM api_requests WHERE account = ? AND sent_at <= ?",
                    (account, horizon),
                )
                count, oldest, newest, own, own_oldest, others, others_oldest = conn.execute(
                    "SELECT count(*), min(sent_at), max(sent_at), "
                    "count(*) FILTER (WHERE spender = ?), "
                    "min(sent_at) FILTER (WHERE spender = ?), "
                    "count(*) FILTER (WHERE spender <> ?), "
                    "min(sent_at) FILTER (WHERE spender <> ?) "
                    "FROM api_requests WHERE account = ?",
                    (spender, spender, reserved_for, reserved_for, account),
                ).fetchone()
                if share is not None and own >= share:
                    frees = from_micros(own_oldest) if own else now
                    assert frees is not None
                    return RequestSlot(
                        False, frees_at=frees + timedelta(seconds=window_s), share_spent=True
                    )
                if reserve > 0 and spender != reserved_for and others >= budget - reserve:
                    frees = from_micros(others_oldest) if others else now
                    assert frees is not None
                    return RequestSlot(
                        False, frees_at=frees + timedelta(seconds=window_s), reserved=True
                    )
                if count < budget:
                    # Never older than a slot already taken: a caller whose clock read came
                    # before another's lock must not free its slot early.
                    taken = stamp if newest is None else max(stamp, int(newest))
                    conn.execute(
                        "INSERT INTO api_requests (account, sent_at, spender) VALUES (?, ?, ?)",
                        (account, taken, spender),
                    )
                    return RequestSlot(True)
                frees = from_micros(oldest)
                assert frees is not None
                return RequestSlot(False, frees_at=frees + timedelta(seconds=window_s))

        return await self.db.run(work)

    async def pause_requests(self, account: str, until: datetime) -> None:
        def work() -> None:
            self.db.conn.execute(
                "INSERT INTO api_pauses VALUES (?, ?) ON CONFLICT (account) "
                "DO UPDATE SET until = max(until, excluded.until)",
                (account, to_micros(until)),
            )

        await self.db.run(work)

    async def requests_paused_until(self, account: str, now: datetime) -> datetime | None:
        def work() -> datetime | None:
            row = self.db.conn.execute(
                "SELECT until FROM api_pauses WHERE account = ?", (account,)
            ).fetchone()
            return from_micros(row[0]) if row is not None and row[0] > to_micros(now) else None

        return await self.db.run(work)

    async def requests_in_window(
        self, account: str, now: datetime, window_s: float, *, spender: str | None = None
    ) -> int:
        horizon = to_micros(now - timedelta(seconds=window_s))
        mine = "" if spender is None else " AND spender = ?"
        params = (account, horizon) if spender is None else (account, horizon, spender)

        def work() -> int:
            row = self.db.conn.execute(
                f"SELECT count(*) FROM api_requests WHERE account = ? AND sent_at > ?{mine}",
                params,
            ).fetchone()
            return int(row[0])

        return await self.db.run(work)
