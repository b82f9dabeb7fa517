"""The embedded event log itself: the file, its topics, appending records; its consumers are
:class:`~consumers.eventlog.sqlite.consumer.SQLiteConsumer`, its ports (on the same connection)
:class:`~consumers.eventlog.sqlite.inspection.SQLiteInspection`,
:class:`~consumers.eventlog.sqlite.retention.SQLiteRetention` and
:class:`~consumers.eventlog.sqlite.letters.SQLiteDeadLetters`."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from consumers.eventlog.port import AssignCallback, Consumer, EventLog, OutRecord, Topics
from consumers.eventlog.sqlite.consumer import SQLiteConsumer
from consumers.eventlog.sqlite.inspection import SQLiteInspection
from consumers.eventlog.sqlite.letters import SQLiteDeadLetters
from consumers.eventlog.sqlite.records import AppendSignal, append_records
from consumers.eventlog.sqlite.retention import SQLiteRetention
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
        self.inspection = SQLiteInspection(self.db)
        self.retention = SQLiteRetention(self.db)
        self.dead_letters = SQLiteDeadLetters(self.db, self._appended)

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
