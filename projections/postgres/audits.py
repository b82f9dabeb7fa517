"""The read model in PostgreSQL (see the port): rows by id, pages of the list, the watchdog's
stale running audits (and that query's plan), histories, events by cause, counts and
summaries for the console and the brake, every row in keyset batches; and waiting for a change
wakes on the projector's notification (``changes.py``) instead of polling.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import datetime
from typing import Any

from projections.audits import ENDED_SQL, LATEST, UNSET, AuditReads, url_prefixes
from projections.postgres.changes import ChangeFeed
from projections.postgres.connection import PostgresDB
from projections.postgres.histories import fetch_histories
from projections.postgres.rows import SELECT_ROWS, decode_row, event_uuids, recorded
from projections.row import AuditRow
from projections.values import HistoryEntry
from statemachine.events import EVENT_ADAPTER, AuditEvent
from statemachine.idempotency import Key

__all__ = ["STALE_RUNNING", "PostgresAudits"]

STALE_RUNNING = (
    f"{SELECT_ROWS} WHERE status = 'running' AND started_at < $1 "
    "ORDER BY last_observed_at NULLS FIRST, started_at, audit_id LIMIT $2"
)

# The distinct workflows audits name, each found by the audits_workflow index (a loose index
# scan: one look-up a workflow, however many audits name it).
WORKFLOWS = (
    "WITH RECURSIVE w(name) AS ("
    "SELECT min(workflow) FROM audits WHERE workflow IS NOT NULL "
    "UNION ALL SELECT (SELECT min(workflow) FROM audits WHERE workflow > w.name) "
    "FROM w WHERE w.name IS NOT NULL) "
    "SELECT name FROM w WHERE name IS NOT NULL LIMIT $1"
)


class PostgresAudits(AuditReads):
    watchdog_query = STALE_RUNNING

    def __init__(self, db: PostgresDB, changes: ChangeFeed) -> None:
        self.db = db
        self._changes = changes

    async def get(self, audit_id: str) -> AuditRow | None:
        with self.db.errors(f"get audit {audit_id}"):
            rec = await self.db.pool.fetchrow(f"{SELECT_ROWS} WHERE audit_id = $1", audit_id)
        return decode_row(rec) if rec is not None else None

    async def holding(self, instance_ids: Sequence[str]) -> dict[str, AuditRow]:
        wanted = list(dict.fromkeys(instance_ids))
        if not wanted:
            return {}
        with self.db.errors("find the audits holding instances"):
            recs = await self.db.pool.fetch(
                f"{SELECT_ROWS} WHERE workflow_instance_id = ANY($1::text[]) "
                "ORDER BY started_at, audit_id",
                wanted,
            )
        found: dict[str, AuditRow] = {}
        for rec in recs:
            row = decode_row(rec)
            found[row.state.workflow_instance_id or ""] = row  # the last started wins
        return found

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
        keys = _keys(sort, descending, now, args)
        down = descending != backwards
        if after is not None:
            marks = []
            for value in after:
                args.append(value)
                marks.append(f"${len(args)}")
            where.append(f"({', '.join(keys)}) {'<' if down else '>'} ({', '.join(marks)})")
        args.append(limit)
        direction = " DESC" if down else ""
        sql = (
            SELECT_ROWS
            + (" WHERE " + " AND ".join(where) if where else "")
            + " ORDER BY "
            + ", ".join(k + direction for k in keys)
            + f" LIMIT ${len(args)}"
        )
        with self.db.errors("list audits"):
            recs = await self.db.pool.fetch(sql, *args)
        return [decode_row(r) for r in recs]

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
        sql = "SELECT count(*) FROM audits" + (" WHERE " + " AND ".join(where) if where else "")
        with self.db.errors("count audits"):
            return int(await self.db.pool.fetchval(sql, *args))

    async def workflows(self, limit: int = 100) -> list[str]:
        with self.db.errors("list the workflows of audits"):
            recs = await self.db.pool.fetch(WORKFLOWS, limit)
        return [r[0] for r in recs]

    async def count_stalled(self) -> int:
        with self.db.errors("count stalled audits"):
            return int(
                await self.db.pool.fetchval(
                    "SELECT count(*) FROM audits WHERE stalled_at IS NOT NULL "
                    "AND status = 'running'"
                )
            )

    async def count_retention_at_risk(self, seen_before: datetime) -> int:
        with self.db.errors("count audits at risk of retention"):
            return int(
                await self.db.pool.fetchval(
                    "SELECT count(*) FROM audits WHERE status = 'running' AND "
                    "(last_observed_at < $1 OR (last_observed_at IS NULL AND started_at < $1))",
                    seen_before,
                )
            )

    async def history(self, audit_id: str) -> list[HistoryEntry]:
        with self.db.errors(f"history of audit {audit_id}"):
            recs = await self.db.pool.fetch(
                'SELECT body, topic, partition, "offset", recorded_at FROM audit_events '
                "WHERE audit_id = $1 ORDER BY seq",
                audit_id,
            )
        return [
            HistoryEntry(
                EVENT_ADAPTER.validate_json(body),
                (t, p, o) if t is not None else None,
                rec,
            )
            for body, t, p, o, rec in recs
        ]

    async def histories(self, audit_ids: Sequence[str]) -> dict[str, list[HistoryEntry]]:
        with self.db.errors("histories of audits"):
            return await fetch_histories(self.db.pool, audit_ids)

    async def recorded(self, events: Sequence[AuditEvent]) -> dict[Key, AuditEvent]:
        if not events:
            return {}
        with self.db.errors("read recorded events"):
            return await recorded(self.db.pool, events)

    async def caused_by(self, causation_ids: Iterable[str]) -> list[AuditEvent]:
        ids = event_uuids(causation_ids)
        if not ids:
            return []
        with self.db.errors("read caused events"):
            recs = await self.db.pool.fetch(
                "SELECT body FROM audit_events WHERE causation_id = ANY($1::uuid[]) ORDER BY seq",
                ids,
            )
        return [EVENT_ADAPTER.validate_json(r[0]) for r in recs]

    async def recorded_times(
        self, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], datetime]:
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        with self.db.errors("read when events were recorded"):
            recs = await self.db.pool.fetch(
                "SELECT e.audit_id, e.event_id::text AS event_id, e.recorded_at "
                "FROM audit_events e JOIN unnest($1::text[], $2::uuid[]) AS k(audit_id, event_id) "
                "ON e.event_id = k.event_id AND e.audit_id = k.audit_id",
                [a for a, _ in wanted],
                [e for _, e in wanted],
            )
        return {(r["audit_id"], r["event_id"]): r["recorded_at"] for r in recs}

    async def terminations_requested(self, since: datetime) -> int:
        with self.db.errors("count the terminations asked for"):
            n = await self.db.pool.fetchval(
                "SELECT count(*) FROM audits WHERE termination_requested_at >= $1",
                since,
            )
        return int(n or 0)

    async def stale_running(self, started_before: datetime, limit: int) -> list[AuditRow]:
        with self.db.errors("select stale running audits"):
            recs = await self.db.pool.fetch(STALE_RUNNING, started_before, limit)
        return [decode_row(r) for r in recs]

    async def explain_stale_running(
        self, started_before: datetime, limit: int, *, analyze: bool = True
    ) -> str:
        """The plan of the watchdog query (``EXPLAIN (ANALYZE, BUFFERS)`` by default)."""
        options = "ANALYZE, BUFFERS" if analyze else "COSTS"
        with self.db.errors("explain the watchdog query"):
            recs = await self.db.pool.fetch(
                f"EXPLAIN ({options}) {STALE_RUNNING}", started_before, limit
            )
        return "\n".join(r[0] for r in recs)

    async def count_by_status(self) -> dict[str, int]:
        with self.db.errors("count audits"):
            recs = await self.db.pool.fetch("SELECT status, count(*) FROM audits GROUP BY status")
        return {s: n for s, n in recs}

    async def failure_counts(self, since: datetime) -> dict[tuple[str, str | None], int]:
        with self.db.errors("count failures"):
            recs = await self.db.pool.fetch(
                "SELECT error_code, reconciled_by, count(*) FROM audits WHERE status = 'failed' "
                "AND failed_at >= $1 GROUP BY error_code, reconciled_by",
                since,
            )
        return {(code, by): n for code, by, n in recs}

    async def running_summary(self, started_before: datetime) -> tuple[int, datetime | None]:
        with self.db.errors("summarise running audits"):
            rec = await self.db.pool.fetchrow(
                "SELECT count(*) FILTER (WHERE started_at < $1), min(started_at) FROM audits "
                "WHERE status = 'running'",
                started_before,
            )
        assert rec is not None
        return int(rec[0]), rec[1]

    async def iter_rows(self, batch: int = 1000) -> AsyncIterator[AuditRow]:
        """Keyset batches: no connection or transaction is held between batches."""
        last = ""
        while True:
            with self.db.errors("iterate audits"):
                recs = await self.db.pool.fetch(
                    f"{SELECT_ROWS} WHERE audit_id > $1 ORDER BY audit_id LIMIT $2", last, batch
                )
            if not recs:
                return
            for rec in recs:
                yield decode_row(rec)
            last = recs[-1][0]

    async def changed(self, timeout: float) -> None:
        await self._changes.wait(timeout)

    async def failures_by_hour(self, since: datetime) -> dict[tuple[datetime, str], int]:
        with self.db.errors("count failures by hour"):
            recs = await self.db.pool.fetch(
                "SELECT date_trunc('hour', failed_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', "
                "error_code, count(*) FROM audits WHERE status = 'failed' AND failed_at >= $1 "
                "GROUP BY 1, 2",
                since,
            )
        return {(hour, code): n for hour, code, n in recs}


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
            args.append(value)
            where.append(f"{column} = ${len(args)}")
    if started_before is not None:
        args.append(started_before)
        where.append(f"started_at < ${len(args)}")
    if shadow:
        where.append(
            "status = 'running' AND EXISTS (SELECT 1 FROM audit_events e WHERE "
            "e.audit_id = audits.audit_id AND e.type = 'AuditFailureSimulated')"
        )
    if held is not None:
        where.append(f"held_decision_id IS {'NOT ' if held else ''}NULL")
    if workflow is not None:  # the default workflow's audits may name none
        args.append(workflow)
        n = len(args)
        default = workflow == default_workflow
        where.append(f"(workflow = ${n} OR workflow IS NULL)" if default else f"workflow = ${n}")
    if stalled is not None:
        where.append(f"stalled_at IS {'NOT ' if stalled else ''}NULL")
    if q:
        # Each term an index finds (the key, audits_instance, audits_project, audits_url:
        # byte order, as the index is COLLATE "C"); the planner ORs their bitmaps.
        args.append(q)
        n = len(args)
        terms = [f"audit_id = ${n}", f"workflow_instance_id = ${n}", f"project_id = ${n}"]
        for low, high in url_prefixes(q):
            args.extend([low, high])
            terms.append(
                f'(start_url COLLATE "C" >= ${len(args) - 1} '
                f'AND start_url COLLATE "C" < ${len(args)})'
            )
        where.append(f"({' OR '.join(terms)})")
    return where, args


def _keys(sort: str, descending: bool, now: datetime | None, args: list[Any]) -> list[str]:
    """The columns of the keyset of ``sort`` (``audit_id`` last); a value it needs is added
    to ``args``."""
    if sort == "ended":
        args.append(UNSET if descending else LATEST)
        return [f"COALESCE({ENDED_SQL}, ${len(args)})", "audit_id"]
    if sort == "status":
        return ["status", "started_at", "audit_id"]
    if sort == "age":
        if now is None:
            end = "started_at"
        else:
            args.append(now)
            end = f"${len(args)}::timestamptz"
        return [f"COALESCE(COALESCE({ENDED_SQL}, {end}) - started_at, interval '0')", "audit_id"]
    return ["started_at", "audit_id"]
