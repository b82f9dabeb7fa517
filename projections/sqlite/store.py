"""The embedded projection store (SQLite).

Deviations: SQLite has no timestamp type, so timestamps are stored as INTEGER microseconds
since the Unix epoch (UTC) — typed, sortable and exact — and converted at this boundary. The
watchdog lock is a lease row with an expiry instead of an advisory lock.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from projections.row import (
    COLUMN_KINDS,
    STORED_COLUMNS,
    TIMESTAMPS,
    AuditRow,
    ColumnKind,
    project,
)
from projections.sqlite.connection import SQLiteDB, sqlite_path
from projections.store import ApplyResult, HistoryEntry, Position, ProjectionStore
from statemachine.errors import StoreError
from statemachine.events import EVENT_ADAPTER, AuditEvent

__all__ = ["SQLiteStore"]

SCHEMA_VERSION = 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ROW_COLUMNS: tuple[str, ...] = STORED_COLUMNS
# Timestamps are INTEGER microseconds since the epoch (UTC), booleans 0/1, uuids text.
_TYPE_OF_KIND: dict[ColumnKind, str] = {
    "text": "TEXT",
    "integer": "INTEGER",
    "timestamp": "INTEGER",
    "boolean": "INTEGER",
    "uuid": "TEXT",
}
_CONSTRAINTS = {
    "audit_id": " PRIMARY KEY",
    "status": " NOT NULL",
    "overturned": " NOT NULL DEFAULT 0",
    "version": " NOT NULL",
}
_AUDITS = ",\n    ".join(
    f"{c} {_TYPE_OF_KIND[kind]}{_CONSTRAINTS.get(c, '')}" for c, kind in COLUMN_KINDS.items()
)

_SCHEMA_TEMPLATE = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS audits (
    {audits}
);
CREATE INDEX IF NOT EXISTS audits_watchdog ON audits
    (last_observed_at, started_at) WHERE status = 'running';
CREATE INDEX IF NOT EXISTS audits_listing ON audits (status, started_at, audit_id);
CREATE INDEX IF NOT EXISTS audits_started ON audits (started_at, audit_id);
CREATE TABLE IF NOT EXISTS audit_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL UNIQUE, audit_id TEXT NOT NULL, type TEXT NOT NULL,
    occurred_at INTEGER NOT NULL, causation_id TEXT,
    topic TEXT, partition INTEGER, "offset" INTEGER,
    body TEXT NOT NULL, recorded_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_events_audit ON audit_events (audit_id, seq);
CREATE INDEX IF NOT EXISTS audit_events_causation ON audit_events (causation_id)
    WHERE causation_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS projector_offsets (
    consumer TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL,
    next_offset INTEGER NOT NULL, PRIMARY KEY (consumer, topic, partition)
);
CREATE TABLE IF NOT EXISTS processes (
    process TEXT NOT NULL, component TEXT NOT NULL, last_seen INTEGER NOT NULL,
    PRIMARY KEY (process, component)
);
CREATE TABLE IF NOT EXISTS telemetry_sent (event_id TEXT PRIMARY KEY, sent_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS locks (
    name TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at REAL NOT NULL
)
"""
_SCHEMA = _SCHEMA_TEMPLATE.replace("{audits}", _AUDITS)

_PLACEHOLDERS = ", ".join("?" for _ in ROW_COLUMNS)
_UPSERT = (
    f"INSERT INTO audits ({', '.join(ROW_COLUMNS)}) VALUES ({_PLACEHOLDERS}) "
    "ON CONFLICT (audit_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in ROW_COLUMNS if c != "audit_id")
)
_SELECT = f"SELECT {', '.join(ROW_COLUMNS)} FROM audits"


def to_micros(value: datetime | None) -> int | None:
    if value is None:
        return None
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(value: int | None) -> datetime | None:
    if value is None:
        return None
    return _EPOCH + timedelta(microseconds=value)


_BOOLEANS = tuple(c for c, kind in COLUMN_KINDS.items() if kind == "boolean")


def _encode_row(row: AuditRow, now: int) -> tuple[Any, ...]:
    values = row.values()
    values["updated_at"] = now
    out: list[Any] = []
    for name, kind in COLUMN_KINDS.items():
        value = values[name]
        if kind == "timestamp" and name != "updated_at":
            value = to_micros(value)
        elif kind == "uuid":
            value = str(value) if value else None
        elif kind == "boolean":
            value = int(bool(value))
        out.append(value)
    return tuple(out)


def _decode_row(values: Sequence[Any]) -> AuditRow:
    data = dict(zip(ROW_COLUMNS, values, strict=True))
    for name in TIMESTAMPS:
        data[name] = from_micros(data[name])
    for name in _BOOLEANS:
        data[name] = bool(data[name])
    return AuditRow.from_values(data)


def _chunks(items: Sequence[Any], size: int = 500) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class SQLiteStore(ProjectionStore):
    def __init__(self, url: str) -> None:
        try:
            path = sqlite_path(url)
        except ValueError as exc:
            raise StoreError(str(exc), retriable=False) from None
        self.db = SQLiteDB(path, lambda msg, retriable: StoreError(msg, retriable=retriable))
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    async def start(self) -> None:
        await self.db.start(_SCHEMA)

    async def stop(self) -> None:
        await self.db.stop()

    async def init(self) -> int:
        def work() -> int:
            with self.db.transaction() as conn:
                row = conn.execute("SELECT version FROM schema_version").fetchone()
                if row is None:
                    conn.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
            return SCHEMA_VERSION

        return await self.db.run(work)

    async def ping(self) -> None:
        await self.db.run(lambda: self.db.conn.execute("SELECT 1").fetchone())

    # -- apply ----------------------------------------------------------------------------

    def _load_rows(self, conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, AuditRow]:
        rows: dict[str, AuditRow] = {}
        for chunk in _chunks(ids):
            marks = ", ".join("?" for _ in chunk)
            for values in conn.execute(f"{_SELECT} WHERE audit_id IN ({marks})", chunk):
                row = _decode_row(values)
                rows[row.audit_id] = row
        return rows

    def _apply(
        self,
        events: Sequence[tuple[AuditEvent, Position]],
        offsets: Mapping[tuple[str, int], int],
        consumer: str,
        bodies: Sequence[bytes | None] | None,
    ) -> ApplyResult:
        now = to_micros(datetime.now(UTC)) or 0
        with self.db.transaction() as conn:
            ids = list(dict.fromkeys(str(e.event_id) for e, _ in events))
            seen: set[str] = set()
            for chunk in _chunks(ids):
                marks = ", ".join("?" for _ in chunk)
                seen.update(
                    r[0]
                    for r in conn.execute(
                        f"SELECT event_id FROM audit_events WHERE event_id IN ({marks})", chunk
                    )
                )
            fresh: list[int] = []
            for i, (event, _) in enumerate(events):
                key = str(event.event_id)
                if key in seen:
                    continue
                seen.add(key)
                fresh.append(i)
            rows = self._load_rows(conn, list({events[i][0].audit_id for i in fresh}))
            history = []
            changed: dict[str, AuditRow] = {}
            for i in fresh:
                event, (topic, partition, offset) = events[i]
                verbatim = bodies[i] if bodies is not None else None
                row = project(rows.get(event.audit_id), event)
                rows[event.audit_id] = row
                if row.state.exists:
                    changed[event.audit_id] = row
                history.append(
                    (
                        str(event.event_id),
                        event.audit_id,
                        event.type,
                        to_micros(event.occurred_at),
                        str(event.causation_id) if event.causation_id else None,
                        topic,
                        partition,
                        offset,
                        verbatim.decode() if verbatim is not None else event.model_dump_json(),
                        now,
                    )
                )
            conn.executemany(
                "INSERT INTO audit_events (event_id, audit_id, type, occurred_at, causation_id,"
                ' topic, partition, "offset", body, recorded_at)'
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                history,
            )
            conn.executemany(_UPSERT, [_encode_row(r, now) for r in changed.values()])
            conn.executemany(
                "INSERT INTO projector_offsets VALUES (?, ?, ?, ?) "
                "ON CONFLICT (consumer, topic, partition) DO UPDATE SET "
                "next_offset = excluded.next_offset",
                [(consumer, t, p, n) for (t, p), n in offsets.items()],
            )
        return ApplyResult(applied=len(fresh), skipped=len(events) - len(fresh))

    async def apply(
        self,
        events: Sequence[tuple[AuditEvent, Position]],
        offsets: Mapping[tuple[str, int], int],
        consumer: str,
        bodies: Sequence[bytes | None] | None = None,
    ) -> ApplyResult:
        return await self.db.run(self._apply, events, offsets, consumer, bodies)

    async def stored_offsets(self, consumer: str) -> dict[tuple[str, int], int]:
        def work() -> dict[tuple[str, int], int]:
            cur = self.db.conn.execute(
                "SELECT topic, partition, next_offset FROM projector_offsets WHERE consumer = ?",
                (consumer,),
            )
            return {(t, p): n for t, p, n in cur}

        return await self.db.run(work)

    async def reset(self, consumer: str) -> None:
        def work() -> None:
            with self.db.transaction() as conn:
                conn.execute("DELETE FROM audits")
                conn.execute("DELETE FROM audit_events")
                conn.execute("DELETE FROM projector_offsets WHERE consumer = ?", (consumer,))

        await self.db.run(work)

    # -- reads ----------------------------------------------------------------------------

    async def get(self, audit_id: str) -> AuditRow | None:
        def work() -> AuditRow | None:
            values = self.db.conn.execute(f"{_SELECT} WHERE audit_id = ?", (audit_id,)).fetchone()
            return _decode_row(values) if values else None

        return await self.db.run(work)

    async def list_audits(
        self,
        *,
        status: str | None = None,
        limit: int = 100,
        after: tuple[datetime, str] | None = None,
    ) -> list[AuditRow]:
        def work() -> list[AuditRow]:
            where: list[str] = []
            args: list[Any] = []
            if status is not None:
                where.append("status = ?")
                args.append(status)
            if after is not None:
                where.append("(started_at, audit_id) < (?, ?)")
                args.extend([to_micros(after[0]), after[1]])
            sql = _SELECT + (" WHERE " + " AND ".join(where) if where else "")
            sql += " ORDER BY started_at DESC, audit_id DESC LIMIT ?"
            args.append(limit)
            return [_decode_row(v) for v in self.db.conn.execute(sql, args)]

        return await self.db.run(work)

    async def history(self, audit_id: str) -> list[HistoryEntry]:
        def work() -> list[HistoryEntry]:
            cur = self.db.conn.execute(
                'SELECT body, topic, partition, "offset", recorded_at FROM audit_events '
                "WHERE audit_id = ? ORDER BY seq",
                (audit_id,),
            )
            return [
                HistoryEntry(
                    EVENT_ADAPTER.validate_json(body),
                    (t, p, o) if t is not None else None,
                    from_micros(rec),
                )
                for body, t, p, o, rec in cur
            ]

        return await self.db.run(work)

    async def caused_by(self, causation_ids: Iterable[str]) -> list[AuditEvent]:
        ids = list(causation_ids)

        def work() -> list[AuditEvent]:
            out: list[AuditEvent] = []
            for chunk in _chunks(ids):
                marks = ", ".join("?" for _ in chunk)
                cur = self.db.conn.execute(
                    f"SELECT body FROM audit_events WHERE causation_id IN ({marks}) ORDER BY seq",
                    chunk,
                )
                out.extend(EVENT_ADAPTER.validate_json(b) for (b,) in cur)
            return out

        return await self.db.run(work)

    async def stale_running(self, started_before: datetime, limit: int) -> list[AuditRow]:
        def work() -> list[AuditRow]:
            cur = self.db.conn.execute(
                f"{_SELECT} WHERE status = 'running' AND started_at < ? "
                "ORDER BY last_observed_at IS NOT NULL, last_observed_at, started_at, audit_id "
                "LIMIT ?",
                (to_micros(started_before), limit),
            )
            return [_decode_row(v) for v in cur]

        return await self.db.run(work)

    async def count_by_status(self) -> dict[str, int]:
        def work() -> dict[str, int]:
            cur = self.db.conn.execute("SELECT status, COUNT(*) FROM audits GROUP BY status")
            return dict(cur.fetchall())

        return await self.db.run(work)

    async def iter_rows(self) -> AsyncIterator[AuditRow]:
        last = ""
        while True:
            batch = await self.db.run(
                lambda after=last: [
                    _decode_row(v)
                    for v in self.db.conn.execute(
                        f"{_SELECT} WHERE audit_id > ? ORDER BY audit_id LIMIT 1000", (after,)
                    )
                ]
            )
            if not batch:
                return
            for row in batch:
                yield row
            last = batch[-1].audit_id

    # -- coordination ---------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def watchdog_lock(self) -> AsyncIterator[bool]:
        def take() -> bool:
            now = time.time()
            with self.db.transaction() as conn:
                row = conn.execute(
                    "SELECT owner, expires_at FROM locks WHERE name = 'watchdog'"
                ).fetchone()
                if row is not None and row[0] != self.owner and row[1] > now:
                    return False
                conn.execute(
                    "INSERT INTO locks VALUES ('watchdog', ?, ?) ON CONFLICT (name) DO UPDATE "
                    "SET owner = excluded.owner, expires_at = excluded.expires_at",
                    (self.owner, now + 300),
                )
                return True

        def release() -> None:
            self.db.conn.execute(
                "DELETE FROM locks WHERE name = 'watchdog' AND owner = ?", (self.owner,)
            )

        held = await self.db.run(take)
        try:
            yield held
        finally:
            if held:
                await self.db.run(release)

    async def heartbeat(self, process: str, components: Sequence[str], now: datetime) -> None:
        stamp = to_micros(now)

        def work() -> None:
            self.db.conn.executemany(
                "INSERT INTO processes VALUES (?, ?, ?) ON CONFLICT (process, component) "
                "DO UPDATE SET last_seen = excluded.last_seen",
                [(process, c, stamp) for c in components],
            )

        await self.db.run(work)

    async def live_components(self, since: datetime) -> dict[str, list[str]]:
        def work() -> dict[str, list[str]]:
            out: dict[str, list[str]] = {}
            cur = self.db.conn.execute(
                "SELECT component, process FROM processes WHERE last_seen >= ?",
                (to_micros(since),),
            )
            for component, process in cur:
                out.setdefault(component, []).append(process)
            return out

        return await self.db.run(work)

    async def forget_process(self, process: str) -> None:
        await self.db.run(
            lambda: self.db.conn.execute("DELETE FROM processes WHERE process = ?", (process,))
        )

    async def telemetry_sent(self, event_ids: Iterable[str]) -> set[str]:
        ids = list(event_ids)

        def work() -> set[str]:
            out: set[str] = set()
            for chunk in _chunks(ids):
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
