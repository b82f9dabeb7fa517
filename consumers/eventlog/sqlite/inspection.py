"""What the embedded log holds, read outside any consumer group (the inspection port,
documented in ``eventlog/inspection.py``), on the log's connection: every topic has the one
partition 0; offsets and records come from the ``records`` table (``records.py``), a group's
offsets from ``group_offsets``."""

from __future__ import annotations

from collections.abc import AsyncIterator

from consumers.eventlog.inspection import LogInspection
from consumers.eventlog.sqlite.records import end_offset, fetch_records, offset_at, start_offset
from consumers.eventlog.values import Record
from projections.sqlite.connection import SQLiteDB

__all__ = ["SQLiteInspection"]

_BATCH = 5000


class SQLiteInspection(LogInspection):
    def __init__(self, db: SQLiteDB) -> None:
        self.db = db

    async def partitions(self, topic: str) -> list[int]:
        return [0]

    async def end_offsets(self, topic: str) -> dict[int, int]:
        return await self.db.run(lambda: {0: end_offset(self.db.conn, topic)})

    async def start_offsets(self, topic: str) -> dict[int, int]:
        return await self.db.run(lambda: {0: start_offset(self.db.conn, topic)})

    async def offsets_at(self, topic: str, at_ms: int) -> dict[int, int]:
        return await self.db.run(lambda: {0: offset_at(self.db.conn, topic, at_ms)})

    def _fetch(self, topic: str, start: int, end: int | None, limit: int) -> list[Record]:
        return fetch_records(self.db.conn, topic, start, end, limit)

    async def read(
        self, topic: str, partition: int, start: int, end: int | None = None
    ) -> AsyncIterator[list[Record]]:
        if end is None:
            end = (await self.end_offsets(topic))[0]
        pos = start
        while pos < end:
            batch = await self.db.run(self._fetch, topic, pos, end, _BATCH)
            if not batch:
                return
            yield batch
            pos = batch[-1].offset + 1

    async def group_offsets(self, group: str, topic: str) -> dict[int, int]:
        def work() -> dict[int, int]:
            row = self.db.conn.execute(
                "SELECT next_offset FROM group_offsets WHERE group_id = ? AND topic = ?",
                (group, topic),
            ).fetchone()
            return {0: row[0]} if row else {}

        return await self.db.run(work)
