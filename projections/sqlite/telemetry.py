"""The telemetry outbox's sent events in SQLite (see the port)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from projections.sqlite.connection import SQLiteDB
from projections.sqlite.rows import chunks, to_micros
from projections.telemetry import SentTelemetry

__all__ = ["SQLiteTelemetry"]


class SQLiteTelemetry(SentTelemetry):
    def __init__(self, db: SQLiteDB) -> None:
        self.db = db

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
