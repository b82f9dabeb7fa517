"""Trimming the embedded log (the retention port, documented in ``eventlog/retention.py``): one
write transaction deletes a topic's records below an offset, keeping the last record (the next
offset is counted from it)."""

from __future__ import annotations

from collections.abc import Mapping

from consumers.eventlog.retention import LogRetention
from consumers.eventlog.sqlite.records import delete_before
from projections.sqlite.connection import SQLiteDB

__all__ = ["SQLiteRetention"]


class SQLiteRetention(LogRetention):
    def __init__(self, db: SQLiteDB) -> None:
        self.db = db

    async def trim(self, topic: str, before: Mapping[int, int]) -> None:
        if before.get(0, 0) <= 0:
            return

        def work() -> None:
            with self.db.transaction():
                delete_before(self.db.conn, topic, before[0])

        await self.db.run(work)
