"""The embedded event log: one SQLite file, one partition a topic.

Deviations from the port's Kafka-shaped contract: every topic has exactly one partition, and a
consumer group's partitions belong to one member at a time through a lease row (renewed while
it polls; taken over when it expires or its owner process is gone on this host). Several
processes may share the file: writers serialise on SQLite's write lock (WAL mode).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import socket
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from consumers.eventlog.port import (
    AssignCallback,
    Consumer,
    EventLog,
    OutRecord,
    Record,
    TopicPartition,
    Topics,
)
from projections.sqlite.connection import SQLiteDB, sqlite_path
from statemachine.errors import EventLogError

__all__ = ["SQLiteEventLog"]

T = TypeVar("T")
LEASE_SECONDS = 15.0
_HOST = socket.gethostname()

_SCHEMA = """
CREATE TABLE IF NOT EXISTS topics (name TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS records (
    topic TEXT NOT NULL, "offset" INTEGER NOT NULL, key TEXT, value BLOB NOT NULL,
    headers TEXT NOT NULL, ts INTEGER NOT NULL, PRIMARY KEY (topic, "offset")
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS group_offsets (
    group_id TEXT NOT NULL, topic TEXT NOT NULL, next_offset INTEGER NOT NULL,
    PRIMARY KEY (group_id, topic)
);
CREATE TABLE IF NOT EXISTS leases (
    group_id TEXT NOT NULL, topic TEXT NOT NULL, owner TEXT NOT NULL, expires_at REAL NOT NULL,
    PRIMARY KEY (group_id, topic)
);
"""


def _owner_alive(owner: str) -> bool:
    host, _, rest = owner.partition(":")
    pid_text = rest.split(":", 1)[0]
    if host != _HOST or not pid_text.isdigit():
        return True  # cannot tell: trust the lease's expiry
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SQLiteEventLog(EventLog):
    def __init__(self, url: str, topics: Topics) -> None:
        self.url = url
        self.topics = topics
        path = sqlite_path(url)
        self.db = SQLiteDB(path, lambda msg, retriable: EventLogError(msg, retriable=retriable))
        self._appended = asyncio.Event()

    @property
    def path(self) -> Path:
        return self.db.path

    @property
    def _started(self) -> bool:
        return self.db.started

    async def start(self) -> None:
        await self.db.start(_SCHEMA)

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

    def _append_locked(self, records: Sequence[OutRecord]) -> None:
        next_offsets: dict[str, int] = {}
        now = int(time.time() * 1000)
        rows = []
        for rec in records:
            if rec.topic not in next_offsets:
                row = self.conn.execute(
                    'SELECT MAX("offset") FROM records WHERE topic = ?', (rec.topic,)
                ).fetchone()
                next_offsets[rec.topic] = 0 if row[0] is None else row[0] + 1
            offset = next_offsets[rec.topic]
            next_offsets[rec.topic] = offset + 1
            headers = json.dumps([[k, base64.b64encode(v).decode()] for k, v in rec.headers])
            rows.append((rec.topic, offset, rec.key, rec.value, headers, now))
        self.conn.executemany("INSERT INTO records VALUES (?, ?, ?, ?, ?, ?)", rows)

    async def append(self, records: Sequence[OutRecord]) -> None:
        if not records:
            return

        def work() -> None:
            with self._transaction():
                self._append_locked(records)

        await self._run(work)
        self._appended.set()

    # -- reading ------------------------------------------------------------------------

    async def partitions(self, topic: str) -> list[int]:
        return [0]

    async def end_offsets(self, topic: str) -> dict[int, int]:
        def work() -> dict[int, int]:
            row = self.conn.execute(
                'SELECT MAX("offset") FROM records WHERE topic = ?', (topic,)
            ).fetchone()
            return {0: 0 if row[0] is None else row[0] + 1}

        return await self._run(work)

    def _fetch(self, topic: str, start: int, end: int | None, limit: int) -> list[Record]:
        sql = (
            'SELECT "offset", key, value, headers, ts FROM records '
            'WHERE topic = ? AND "offset" >= ?'
        )
        args: list[Any] = [topic, start]
        if end is not None:
            sql += ' AND "offset" < ?'
            args.append(end)
        sql += ' ORDER BY "offset" LIMIT ?'
        args.append(limit)
        out = []
        for offset, key, value, headers, ts in self.conn.execute(sql, args):
            hdrs = tuple((k, base64.b64decode(v)) for k, v in json.loads(headers))
            out.append(Record(topic, 0, offset, key, bytes(value), hdrs, ts))
        return out

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
        self._appended.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._appended.wait(), timeout)

    def consumer(
        self,
        group: str,
        topics: Sequence[str],
        *,
        on_assign: AssignCallback | None = None,
        on_revoke: AssignCallback | None = None,
        transactional: bool = False,
    ) -> Consumer:
        return SQLiteConsumer(self, group, list(topics), on_assign, on_revoke)


class SQLiteConsumer(Consumer):
    def __init__(
        self,
        log: SQLiteEventLog,
        group: str,
        topics: list[str],
        on_assign: AssignCallback | None,
        on_revoke: AssignCallback | None,
    ) -> None:
        self.log = log
        self.group = group
        self.topics = topics
        self.on_assign = on_assign
        self.on_revoke = on_revoke
        self.owner = f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._assigned: frozenset[TopicPartition] = frozenset()
        self._positions: dict[TopicPartition, int] = {}
        self._renewed = 0.0
        self._started = False
        self._rr = 0

    async def start(self) -> None:
        self._started = True

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        if self._assigned and self.log._started:
            if self.on_revoke is not None:
                await self.on_revoke(self, sorted(self._assigned))
            await self.log._run(self._release)
        self._assigned = frozenset()

    def _release(self) -> None:
        self.log.conn.execute(
            "DELETE FROM leases WHERE group_id = ? AND owner = ?", (self.group, self.owner)
        )

    def _claim(self) -> bool:
        """Take or renew the group's lease on all its topics; True while we hold it."""
        conn = self.log.conn
        now = time.time()
        with self.log._transaction():
            rows = conn.execute(
                "SELECT topic, owner, expires_at FROM leases WHERE group_id = ?", (self.group,)
            ).fetchall()
            held = {t: (o, e) for t, o, e in rows}
            for topic in self.topics:
                owner, expires = held.get(topic, (None, 0.0))
                if owner not in (None, self.owner) and expires > now and _owner_alive(owner):
                    return False
            for topic in self.topics:
                conn.execute(
                    "INSERT INTO leases VALUES (?, ?, ?, ?) ON CONFLICT (group_id, topic) "
                    "DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at",
                    (self.group, topic, self.owner, now + LEASE_SECONDS),
                )
        return True

    def _load_offsets(self) -> dict[TopicPartition, int]:
        out = {}
        for topic in self.topics:
            row = self.log.conn.execute(
                "SELECT next_offset FROM group_offsets WHERE group_id = ? AND topic = ?",
                (self.group, topic),
            ).fetchone()
            out[(topic, 0)] = row[0] if row else 0
        return out

    async def _ensure_lease(self) -> None:
        now = time.monotonic()
        if self._assigned and now - self._renewed < LEASE_SECONDS / 5:
            return
        held = await self.log._run(self._claim)
        self._renewed = now
        if held and not self._assigned:
            self._positions = await self.log._run(self._load_offsets)
            self._assigned = frozenset(self._positions)
            if self.on_assign is not None:
                await self.on_assign(self, sorted(self._assigned))
        elif not held and self._assigned:
            lost = sorted(self._assigned)
            self._assigned = frozenset()
            if self.on_revoke is not None:
                await self.on_revoke(self, lost)

    async def poll(self, max_records: int = 1000, timeout: float = 1.0) -> list[Record]:
        deadline = time.monotonic() + timeout
        while True:
            await self._ensure_lease()
            if self._assigned:
                tps = sorted(self._assigned)
                self._rr += 1
                for i in range(len(tps)):
                    tp = tps[(self._rr + i) % len(tps)]
                    batch = await self.log._run(
                        self.log._fetch, tp[0], self._positions[tp], None, max_records
                    )
                    if batch:
                        self._positions[tp] = batch[-1].offset + 1
                        return batch
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            await self.log.wait_for_append(min(left, 0.05))

    async def commit(
        self, offsets: Mapping[TopicPartition, int], outputs: Sequence[OutRecord] = ()
    ) -> None:
        def work() -> None:
            conn = self.log.conn
            with self.log._transaction():
                for (topic, _), _next in offsets.items():
                    row = conn.execute(
                        "SELECT owner FROM leases WHERE group_id = ? AND topic = ?",
                        (self.group, topic),
                    ).fetchone()
                    if row is None or row[0] != self.owner:
                        raise EventLogError(
                            f"group {self.group!r} lost its lease on {topic}: not committed"
                        )
                if outputs:
                    self.log._append_locked(outputs)
                conn.executemany(
                    "INSERT INTO group_offsets VALUES (?, ?, ?) ON CONFLICT (group_id, topic) "
                    "DO UPDATE SET next_offset = excluded.next_offset",
                    [(self.group, topic, nxt) for (topic, _), nxt in offsets.items()],
                )

        await self.log._run(work)
        if outputs:
            self.log._appended.set()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._positions[tp] = offset

    def assignment(self) -> frozenset[TopicPartition]:
        return self._assigned

    async def committed(self) -> dict[TopicPartition, int]:
        return await self.log._run(self._load_offsets)

    async def lag(self) -> int:
        total = 0
        for tp in self._assigned:
            end = (await self.log.end_offsets(tp[0]))[0]
            total += max(0, end - self._positions.get(tp, 0))
        return total
