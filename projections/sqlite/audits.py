"""The read model in SQLite (see the port): rows by id, pages of the list, the watchdog's
stale running audits, histories, events by cause, counts and summaries, every row in keyset
batches. Point reads (``get``, ``running_summary``) use the read-only connection.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from projections.audits import ENDED_SQL, LATEST, UNSET, AuditReads, url_prefixes
from projections.row import AuditRow
from projections.sqlite.connection import SQLiteDB
from projections.sqlite.histories import read_histories
from projections.sqlite.rows import (
    SELECT_ROWS,
    chunks,
    decode_row,
    from_micros,
    recorded,
    to_micros,
)
from projections.values import HistoryEntry
from statemachine.events import EVENT_ADAPTER, AuditEvent
from statemachine.idempotency import Key

__all__ = ["SQLiteAudits"]

CHANGE_LOOK = 0.02  # seconds between looks at data_version while a reader waits for a change

# An audit whose history holds a shadow-mode failure (the audit_events index finds it).
SIMULATED = (
    "EXISTS (SELECT 1 FROM audit_events e WHERE e.audit_id = audits.audit_id "
    "AND e.type = 'AuditFailureSimulated')"
)

# The distinct workflows audits name, each found by the audits_workflow index (a loose index
# scan: one look-up a workflow, however many audits name it).
WORKFLOWS = (
    "WITH RECURSIVE w(name) AS ("
    "SELECT MIN(workflow) FROM audits WHERE workflow IS NOT NULL "
    "UNION ALL SELECT (SELECT MIN(workflow) FROM audits WHERE workflow > w.name) "
    "FROM w WHERE w.name IS NOT NULL) "
    "SELECT name FROM w WHERE name IS NOT NULL LIMIT ?"
)

HOUR_MICROS = 3_600_000_000  # timestamps are stored in microseconds since the epoch
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class SQLiteAudits(AuditReads):
    def __init__(self, db: SQLiteDB) -> None:
        self.db = db

    async def get(self, audit_id: str) -> AuditRow | None:
        def work(conn: sqlite3.Connection) -> AuditRow | None:
            values = conn.execute(f"{SELECT_ROWS} WHERE audit_id = ?", (audit_id,)).fetchone()
            return decode_row(values) if values else None

        return await self.db.read(work)

    async def holding(self, instance_ids: Sequence[str]) -> dict[str, AuditRow]:
        wanted = list(dict.fromkeys(instance_ids))

        def work(conn: sqlite3.Connection) -> dict[str, AuditRow]:
            found: dict[str, AuditRow] = {}
            for i in range(0, len(wanted), 500):
                chunk = wanted[i : i + 500]
                marks = ",".join("?" * len(chunk))
                query = (
                    f"{SELECT_ROWS} WHERE workflow_instance_id IN ({marks}) "
                    "ORDER BY started_at, audit_id"
                )
                for values in conn.execute(query, chunk):
                    row = decode_row(values)
                    found[row.state.workflow_instance_id or ""] = row  # the last started wins
            return found

        return await self.db.read(work) if wanted else {}

    async def list_audits(
        self,
        *,
        status: str | None = None,
        project: str | None = None,
        code: str | None = None,
        started_before: datetime | None = None,
        limit: int = 100,
        after: tuple[Any, ...] | None = None,
        shadow: bool = False,
        held: bool | None = None,
        q: str | None = None,
        workflow: str | None = None,
        default_workflow: str | None = None,
        stalled: bool | None = None,
        sort: str = "started",
        descending: bool = True,
        backwards: bool = False,
        now: datetime | None = None,
    ) -> list[AuditRow]:
        where, args = _filters(
            status,
            project,
            code,
            started_before,
            shadow,
            held,
            q,
            workflow=workflow,
            default_workflow=default_workflow,
            stalled=stalled,
        )
        keys = _keys(sort, descending, now)
        down = descending != backwards
        if after is not None:
            marks = ", ".join("?" for _ in after)
            where.append(f"({', '.join(keys)}) {'<' if down else '>'} ({marks})")
            args.extend(_key_args(after))
        sql = SELECT_ROWS + (" WHERE " + " AND ".join(where) if where else "")
        direction = " DESC" if down else ""
        sql += " ORDER BY " + ", ".join(k + direction for k in keys) + " LIMIT ?"
        args.append(limit)

        def work() -> list[AuditRow]:
            return [decode_row(v) for v in self.db.conn.execute(sql, args)]

        return await self.db.run(work)

    async def count_audits(
        self,
        *,
        status: str | None = None,
        project: str | None = None,
        code: str | None = None,
        started_before: datetime | None = None,
        shadow: bool = False,
        held: bool | None = None,
        q: str | None = None,
        workflow: str | None = None,
        default_workflow: str | None = None,
        stalled: bool | None = None,
    ) -> int:
        where, args = _filters(
            status,
            project,
            code,
            started_before,
            shadow,
            held,
            q,
            workflow=workflow,
            default_workflow=default_workflow,
            stalled=stalled,
        )
        sql = "SELECT COUNT(*) FROM audits" + (" WHERE " + " AND ".join(where) if where else "")

        def work() -> int:
            return int(self.db.conn.execute(sql, args).fetchone()[0])

        return await self.db.run(work)

    async def workflows(self, limit: int = 100) -> list[str]:
        def work(conn: sqlite3.Connection) -> list[str]:
            return [name for (name,) in conn.execute(WORKFLOWS, (limit,))]

        return await self.db.read(work)

    async def count_stalled(self) -> int:
        def work(conn: sqlite3.Connection) -> int:
            return int(
                conn.execute(  # `+status`: through audits_stalled, not every running row
                    "SELECT COUNT(*) FROM audits WHERE stalled_at IS NOT NULL "
                    "AND +status = 'running'"
                ).fetchone()[0]
            )

        return await self.db.read(work)

    async def count_retention_at_risk(self, seen_before: datetime) -> int:
        def work(conn: sqlite3.Connection) -> int:
            at = to_micros(seen_before)
            found = conn.execute(
                "SELECT COUNT(*) FROM audits WHERE status = 'running' AND (last_observed_at < ? "
                "OR (last_observed_at IS NULL AND started_at < ?))",
                (at, at),
            ).fetchone()
            return int(found[0])

        return await self.db.read(work)

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

    async def recorded(self, events: Sequence[AuditEvent]) -> dict[Key, AuditEvent]:
        return await self.db.run(recorded, self.db.conn, events)

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

    async def recorded_times(
        self, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], datetime]:
        wanted = list(dict.fromkeys(keys))

        def work() -> dict[tuple[str, str], datetime]:
            found: dict[tuple[str, str], datetime] = {}
            for chunk in chunks(wanted):
                marks = ", ".join("(?, ?)" for _ in chunk)
                cur = self.db.conn.execute(
                    "SELECT audit_id, event_id, recorded_at FROM audit_events "
                    f"WHERE (event_id, audit_id) IN (VALUES {marks})",
                    [v for audit_id, event_id in chunk for v in (event_id, audit_id)],
                )
                for audit_id, event_id, at in cur:
                    when = from_micros(at)
                    if when is not None:
                        found[(audit_id, event_id)] = when
            return found

        return await self.db.run(work) if wanted else {}

    async def terminations_requested(self, since: datetime) -> int:
        def work() -> int:
            cur = self.db.conn.execute(
                "SELECT count(*) FROM audits WHERE termination_requested_at >= ?",
                (to_micros(since),),
            )
            return int(cur.fetchone()[0])

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
                "AND failed_at >= ? GROUP BY error_code, reconciled_by",
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

    async def failures_by_hour(self, since: datetime) -> dict[tuple[datetime, str], int]:
        def work(conn: sqlite3.Connection) -> dict[tuple[datetime, str], int]:
            cur = conn.execute(
                f"SELECT failed_at / {HOUR_MICROS}, error_code, COUNT(*) FROM audits "
                "WHERE status = 'failed' AND failed_at >= ? GROUP BY 1, 2",
                (to_micros(since),),
            )
            return {(EPOCH + timedelta(hours=h), code): n for h, code, n in cur.fetchall()}

        return await self.db.read(work)

    async def changed(self, timeout: float) -> None:
        """Return once another connection (a writer here or in another process) has committed,
        or after ``timeout``: SQLite's ``data_version`` of the read connection, looked at every
        few milliseconds — one pragma, not the reader's queries, per look."""
        deadline = time.monotonic() + timeout

        def version(conn: sqlite3.Connection) -> int:
            return int(conn.execute("PRAGMA data_version").fetchone()[0])

        seen = await self.db.read(version)
        while (left := deadline - time.monotonic()) > 0:
            await asyncio.sleep(min(left, CHANGE_LOOK))
            if await self.db.read(version) != seen:
                return


def _filters(
    status: str | None,
    project: str | None,
    code: str | None,
    started_before: datetime | None,
    shadow: bool,
    held: bool | None,
    q: str | None,
    *,
    workflow: str | None = None,
    default_workflow: str | None = None,
    stalled: bool | None = None,
) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    args: list[Any] = []
    for column, value in (("status", status), ("project_id", project), ("error_code", code)):
        if value is not None:
            where.append(f"{column} = ?")
            args.append(value)
    if started_before is not None:
        where.append("started_at < ?")
        args.append(to_micros(started_before))
    if shadow:
        where.append(f"status = 'running' AND {SIMULATED}")
    if held:  # through audits_held: walking audits_started for a few held rows reads them all
        where.append("audit_id IN (SELECT audit_id FROM audits WHERE held_decision_id IS NOT NULL)")
    elif held is not None:
        where.append("held_decision_id IS NULL")
    if workflow is not None:  # the default workflow's audits may name none
        default = workflow == default_workflow
        where.append("(workflow = ? OR workflow IS NULL)" if default else "workflow = ?")
        args.append(workflow)
    if stalled:  # through audits_stalled, as the held filter goes through audits_held
        where.append("audit_id IN (SELECT audit_id FROM audits WHERE stalled_at IS NOT NULL)")
    elif stalled is not None:
        where.append("stalled_at IS NULL")
    if q:
        # Each term an index finds (the key, audits_instance, audits_project, audits_url).
        terms = ["audit_id = ?", "workflow_instance_id = ?", "project_id = ?"]
        args.extend([q, q, q])
        for low, high in url_prefixes(q):
            terms.append("(start_url >= ? AND start_url < ?)")
            args.extend([low, high])
        where.append(f"({' OR '.join(terms)})")
    return where, args


def _keys(sort: str, descending: bool, now: datetime | None) -> list[str]:
    """The columns of the keyset of ``sort`` (``audit_id`` last); times are integers."""
    if sort == "ended":
        unset = UNSET if descending else LATEST
        return [f"COALESCE({ENDED_SQL}, {to_micros(unset)})", "audit_id"]
    if sort == "status":
        return ["status", "started_at", "audit_id"]
    if sort == "age":
        end = to_micros(now) if now is not None else "started_at"
        return [f"COALESCE(COALESCE({ENDED_SQL}, {end}) - started_at, 0)", "audit_id"]
    return ["started_at", "audit_id"]


def _key_args(after: tuple[Any, ...]) -> list[Any]:
    """A keyset cursor's values as the columns hold them (micros for times and ages)."""
    out: list[Any] = []
    for value in after:
        if isinstance(value, datetime):
            out.append(to_micros(value))
        elif isinstance(value, timedelta):
            out.append((value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds)
        else:
            out.append(value)
    return out
