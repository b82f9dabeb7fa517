"""The embedded projection store (SQLite).

Deviations: SQLite has no timestamp type, so timestamps are stored as INTEGER microseconds
since the Unix epoch (UTC) — typed, sortable and exact — and converted at this boundary
(``rows.py``). The watchdog lock is a lease row with an expiry instead of an advisory lock.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from projections.row import AuditRow
from projections.sqlite.batch import apply_batch
from projections.sqlite.brake import SQLiteBrake
from projections.sqlite.checkpoints import SQLiteCheckpoints
from projections.sqlite.connection import SQLiteDB, sqlite_path
from projections.sqlite.coordination import SQLiteCoordination
from projections.sqlite.histories import read_histories
from projections.sqlite.kept import SQLiteKeptHistory
from projections.sqlite.limits import SQLiteLimits
from projections.sqlite.rows import SELECT_ROWS, chunks, decode_row, from_micros, to_micros
from projections.sqlite.schema import SCHEMA, SCHEMA_VERSION, upgrade
from projections.store import ProjectionStore
from projections.values import ApplyResult, HistoryEntry, Position
from statemachine.errors import StoreError
from statemachine.events import EVENT_ADAPTER, AuditEvent

# An audit whose history holds a shadow-mode failure (the audit_events index finds it).
SIMULATED = (
    "EXISTS (SELECT 1 FROM audit_events e WHERE e.audit_id = audits.audit_id "
    "AND e.type = 'AuditFailureSimulated')"
)

__all__ = ["SQLiteStore"]


class SQLiteStore(
    SQLiteCoordination,
    SQLiteLimits,
    SQLiteBrake,
    SQLiteCheckpoints,
    SQLiteKeptHistory,
    ProjectionStore,
):
    def __init__(self, url: str) -> None:
        path = sqlite_path(url)
        self.db = SQLiteDB(path, lambda msg, retriable: StoreError(msg, retriable=retriable))
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    async def start(self) -> None:
        if self.db.started:
            return
        await self.db.start(SCHEMA)

        def work() -> None:
            with self.db.transaction() as conn:
                upgrade(conn)

        try:
            await self.db.run(work)
        except BaseException:
            await self.db.stop()
            raise

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

    def _apply(
        self,
        events: Sequence[tuple[AuditEvent, Position]],
        offsets: Mapping[tuple[str, int], int],
        consumer: str,
        bodies: Sequence[bytes | None] | None,
    ) -> ApplyResult:
        now = to_micros(datetime.now(UTC)) or 0
        with self.db.transaction() as conn:
            return apply_batch(conn, events, offsets, consumer, bodies, now)

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
        def work(conn: sqlite3.Connection) -> AuditRow | None:
            values = conn.execute(f"{SELECT_ROWS} WHERE audit_id = ?", (audit_id,)).fetchone()
            return decode_row(values) if values else None

        return await self.db.read(work)

    async def list_audits(
        self,
        *,
        status: str | None = None,
        project: str | None = None,
        code: str | None = None,
        started_before: datetime | None = None,
        limit: int = 100,
        after: tuple[datetime, str] | None = None,
        shadow: bool = False,
    ) -> list[AuditRow]:
        def work() -> list[AuditRow]:
            where: list[str] = []
            args: list[Any] = []
            for column, value in (
                ("status", status),
                ("project_id", project),
                ("error_code", code),
            ):
                if value is not None:
                    where.append(f"{column} = ?")
                    args.append(value)
            if started_before is not None:
                where.append("started_at < ?")
                args.append(to_micros(started_before))
            if after is not None:
                where.append("(started_at, audit_id) < (?, ?)")
                args.extend([to_micros(after[0]), after[1]])
            if shadow:
                where.append(f"status = 'running' AND {SIMULATED}")
            sql = SELECT_ROWS + (" WHERE " + " AND ".join(where) if where else "")
            sql += " ORDER BY started_at DESC, audit_id DESC LIMIT ?"
            args.append(limit)
            return [decode_row(v) for v in self.db.conn.execute(sql, args)]

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

    async def histories(self, audit_ids: Sequence[str]) -> dict[str, list[HistoryEntry]]:
        return await self.db.run(read_histories, self.db.conn, audit_ids)

    async def caused_by(self, causation_ids: Iterable[str]) -> list[AuditEvent]:
        ids = list(causation_ids)

        def work() -> list[AuditEvent]:
            out: list[AuditEvent] = []
            for chunk in chunks(ids):
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
                f"{SELECT_ROWS} WHERE status = 'running' AND started_at < ? "
                "ORDER BY last_observed_at IS NOT NULL, last_observed_at, started_at, audit_id "
                "LIMIT ?",
                (to_micros(started_before), limit),
            )
            return [decode_row(v) for v in cur]

        return await self.db.run(work)

    async def count_by_status(self) -> dict[str, int]:
        def work() -> dict[str, int]:
            cur = self.db.conn.execute("SELECT status, COUNT(*) FROM audits GROUP BY status")
            return dict(cur.fetchall())

        return await self.db.run(work)

    async def failure_counts(self, since: datetime) -> dict[tuple[str, str | None], int]:
        def work() -> dict[tuple[str, str | None], int]:
            cur = self.db.conn.execute(
                "SELECT error_code, reconciled_by, COUNT(*) FROM audits WHERE status = 'failed' "
                "AND completed_at >= ? GROUP BY error_code, reconciled_by",
                (to_micros(since),),
            )
            return {(code, by): n for code, by, n in cur.fetchall()}

        return await self.db.run(work)

    async def running_summary(self, started_before: datetime) -> tuple[int, datetime | None]:
        def work(conn: sqlite3.Connection) -> tuple[int, datetime | None]:
            stale, oldest = conn.execute(
                "SELECT COALESCE(SUM(started_at < ?), 0), MIN(started_at) FROM audits "
                "WHERE status = 'running'",
                (to_micros(started_before),),
            ).fetchone()
            return int(stale), from_micros(oldest) if oldest is not None else None

        return await self.db.read(work)

    async def iter_rows(self) -> AsyncIterator[AuditRow]:
        last = ""
        while True:
            batch = await self.db.run(
                lambda after=last: [
                    decode_row(v)
                    for v in self.db.conn.execute(
                        f"{SELECT_ROWS} WHERE audit_id > ? ORDER BY audit_id LIMIT 1000", (after,)
                    )
                ]
            )
            if not batch:
                return
            for row in batch:
                yield row
            last = batch[-1].audit_id
