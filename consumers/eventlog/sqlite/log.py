"""The embedded event log itself: the file, its topics, appending and reading records; its
consumers are :class:`~consumers.eventlog.sqlite.consumer.SQLiteConsumer`."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from consumers.eventlog.port import AssignCallback, Consumer, EventLog, OutRecord, Record, Topics
from consumers.eventlog.sqlite.consumer import SQLiteConsumer
from consumers.eventlog.sqlite.records import (
    AppendSignal,
    append_records,
    delete_before,
    end_offset,
    fetch_records,
    offset_at,
    start_offset,
)
from consumers.eventlog.sqlite.schema import SCHEMA
from projections.sqlite.connection import SQLiteDB, sqlite_path
from statemachine.errors import EventLogError

__all__ = ["SQLiteEventLog"]

T = TypeVar("T")


class SQLiteEventLog(EventLog):
    def __init__(self, url: str, topics: Topics) -> None:
        self.url = url
        self.topics = topics
        path = sqlite_path(url)
        self.db = SQLiteDB(path, lambda msg, retriable: EventLogError(msg, retriable=retriable))
        self._appended = AppendSignal()

    @property
    def path(self) -> Path:
        return self.db.path

    async def start(self) -> None:
        await self.db.start(SCHEMA)

    async def stop(self) -> None:
        await self.db.stop()

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await self.db.run(fn, *args)

    @property
    def conn(self) -> sqlite3.Connection:
        return self.db.conn

    def _transaction(self) -> Any:
        return self.db.transaction()

    # -- writing ------------------------------------------------------------------------

    async def init(self) -> list[str]:
        def work() -> list[str]:
            created = []
            for name in self.topics.all():
                cur = self.conn.execute("INSERT OR IGNORE INTO topics VALUES (?)", (name,))
                if cur.rowcount:
                    created.append(name)
            return created

        return await self._run(work)

    async def append(self, records: Sequence[OutRecord]) -> None:
        if not records:
            return

        def work() -> None:
            with self._transaction():
                append_records(self.conn, records)

        await self._run(work)
        self._appended.set()

    # -- reading ------------------------------------------------------------------------

    async def partitions(self, topic: str) -> list[int]:
        return [0]

    async def end_offsets(self, topic: str) -> dict[int, int]:
        return await self._run(lambda: {0: end_offset(self.conn, topic)})

    async def start_offsets(self, topic: str) -> dict[int, int]:
        return await self._run(lambda: {0: start_offset(self.conn, topic)})

    async def offsets_at(self, topic: str, at_ms: int) -> dict[int, int]:
        return await self._run(lambda: {0: offset_at(self.conn, topic, at_ms)})

    async def trim(self, topic: str, before: Mapping[int, int]) -> None:
        if before.get(0, 0) <= 0:
            return

        def work() -> None:
            with self._transaction():
                delete_before(self.conn, topic, before[0])

        await self._run(work)

    def _fetch(self, topic: str, start: int, end: int | None, limit: int) -> list[Record]:
        return fetch_records(self.conn, topic, start, end, limit)

    async def read(
        self, topic: str, partition: int, start: int, end: int | None = None
    ) -> AsyncIterator[list[Record]]:
        if end is None:
            end = (await self.end_offsets(topic))[0]
        pos = start
        while pos < end:
            batch = await self._run(self._fetch, topic, pos, end, 5000)
            if not batch:
                return
            yield batch
            pos = batch[-1].offset + 1

    async def group_offsets(self, group: str, topic: str) -> dict[int, int]:
        def work() -> dict[int, int]:
            row = self.conn.execute(
                "SELECT next_offset FROM group_offsets WHERE group_id = ? AND topic = ?",
                (group, topic),
            ).fetchone()
            return {0: row[0]} if row else {}

        return await self._run(work)

    async def ping(self) -> None:
        await self._run(lambda: self.conn.execute("SELECT 1").fetchone())

    async def wait_for_append(self, timeout: float) -> None:
        """Wake early when this process appends; otherwise after ``timeout``."""
        await self._appended.wait(timeout)

    def consumer(
        self,
        group: str,
        topics: Sequence[str],
        *,
        on_assign: AssignCallback | None = None,
        on_revoke: AssignCallback | None = None,
        transactional: bool = False,
    ) -> Consumer:
        return SQLiteConsumer(self.db, self._appended, group, list(topics), on_assign, on_revoke)
