"""The watched workflows and their orphans in SQLite (see the port). Every write is one
``BEGIN IMMEDIATE`` transaction, so processes sharing the file take turns on its write lock."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from projections.orphans import TERMINATION_RESULTS, OrphanInstances
from projections.sqlite.connection import SQLiteDB
from projections.sqlite.rows import from_micros, to_micros
from projections.values import Orphan, OrphanEvent, OrphanScanRecord, OrphanSighting

__all__ = ["SQLiteOrphans"]

_COLUMNS = (
    "workflow, instance_id, created_on, status, first_seen, last_seen, state, terminated_at, "
    "terminated_by, on_behalf_of, result, seq"
)
_HISTORY = "workflow, instance_id, at, kind, actor, on_behalf_of, detail, seq"
_NOTE = (
    "INSERT INTO orphan_history (workflow, instance_id, at, kind, actor, on_behalf_of, detail) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
# A list of values bound as one JSON array (SQLite's limit on bound parameters never reached).
_EACH = "(SELECT value FROM json_each(?))"


def _time(value: int) -> datetime:
    at = from_micros(value)
    assert at is not None  # NOT NULL
    return at


def _orphan(row: Sequence[Any] | None) -> Orphan | None:
    if row is None:
        return None
    wf, iid, created, status, first, last, state, ended, by, behalf, result, seq = row
    return Orphan(
        wf, iid, _time(created), status, _time(first), _time(last), state, from_micros(ended),
        by, behalf, result, seq,
    )  # fmt: skip


def _event(row: Sequence[Any]) -> OrphanEvent:
    wf, iid, at, kind, actor, behalf, detail, seq = row
    return OrphanEvent(wf, iid, _time(at), kind, actor, behalf, detail, seq)


class SQLiteOrphans(OrphanInstances):
    def __init__(self, db: SQLiteDB) -> None:
        self.db = db

    async def watch(self, workflows: Sequence[str], at: datetime) -> dict[str, datetime]:
        names = sorted(set(workflows))
        since = to_micros(at)

        def work() -> dict[str, datetime]:
            with self.db.transaction() as conn:
                conn.executemany(
                    "INSERT INTO watched_workflows VALUES (?, ?) ON CONFLICT (workflow) DO NOTHING",
                    [(name, since) for name in names],
                )
                rows = conn.execute(
                    f"SELECT workflow, since FROM watched_workflows WHERE workflow IN {_EACH}",
                    (json.dumps(names),),
                ).fetchall()
            return {r[0]: _time(r[1]) for r in rows}

        return await self.db.run(work)

    async def watched(self) -> dict[str, datetime]:
        def work() -> dict[str, datetime]:
            rows = self.db.conn.execute("SELECT workflow, since FROM watched_workflows")
            return {r[0]: _time(r[1]) for r in rows}

        return await self.db.run(work)

    async def held(self, instance_ids: Sequence[str]) -> set[str]:
        if not instance_ids:
            return set()
        wanted = json.dumps(sorted(set(instance_ids)))

        def work() -> set[str]:
            cur = self.db.conn.execute(
                "SELECT DISTINCT workflow_instance_id FROM audits WHERE workflow_instance_id "
                f"IS NOT NULL AND workflow_instance_id IN {_EACH}",
                (wanted,),
            )
            return {r[0] for r in cur}

        return await self.db.run(work)

    async def record_scan(
        self, workflow: str, found: Sequence[OrphanSighting], at: datetime
    ) -> OrphanScanRecord:
        when = to_micros(at)

        def work() -> OrphanScanRecord:
            new: list[str] = []
            with self.db.transaction() as conn:
                for s in found:
                    iid = s.instance_id
                    before = conn.execute(
                        "SELECT state, status FROM orphans WHERE workflow = ? AND instance_id = ?",
                        (workflow, iid),
                    ).fetchone()
                    if before is None:
                        conn.execute(
                            "INSERT INTO orphans (workflow, instance_id, created_on, status, "
                            "first_seen, last_seen, state) VALUES (?1, ?2, ?3, ?4, ?5, ?5, 'open')",
                            (workflow, iid, to_micros(s.created_on), s.status, when),
                        )
                        conn.execute(_NOTE, (workflow, iid, when, "found", None, None, s.status))
                        new.append(iid)
                        continue
                    state = before[0] if before[0] == "terminated" else "open"
                    conn.execute(
                        "UPDATE orphans SET status = ?3, last_seen = max(last_seen, ?4), "
                        "state = ?5 WHERE workflow = ?1 AND instance_id = ?2",
                        (workflow, iid, s.status, when, state),
                    )
                    if before[0] == "gone":
                        conn.execute(_NOTE, (workflow, iid, when, "found", None, None, s.status))
                        new.append(iid)
                    elif before[1] != s.status:
                        conn.execute(_NOTE, (workflow, iid, when, "seen", None, None, s.status))
                seen = json.dumps([s.instance_id for s in found])
                rows = conn.execute(
                    "UPDATE orphans SET state = 'gone' WHERE workflow = ? AND state = 'open' "
                    f"AND instance_id NOT IN {_EACH} RETURNING instance_id, EXISTS (SELECT 1 "
                    "FROM audits WHERE audits.workflow_instance_id = orphans.instance_id)",
                    (workflow, seen),
                ).fetchall()
                gone = sorted(r[0] for r in rows if not r[1])
                adopted = sorted(r[0] for r in rows if r[1])
                for kind, ids in (("gone", gone), ("adopted", adopted)):
                    conn.executemany(
                        _NOTE, [(workflow, iid, when, kind, None, None, None) for iid in ids]
                    )
                still = conn.execute(
                    "SELECT count(*) FROM orphans WHERE workflow = ? AND state = 'open'",
                    (workflow,),
                ).fetchone()[0]
            return OrphanScanRecord(new, gone, adopted, int(still))

        return await self.db.run(work)

    async def get(self, workflow: str, instance_id: str) -> Orphan | None:
        def work() -> Orphan | None:
            row = self.db.conn.execute(
                f"SELECT {_COLUMNS} FROM orphans WHERE workflow = ? AND instance_id = ?",
                (workflow, instance_id),
            ).fetchone()
            return _orphan(row)

        return await self.db.run(work)

    async def page(
        self,
        workflow: str | None = None,
        *,
        state: str | None = "open",
        limit: int = 100,
        after: int = 0,
    ) -> list[Orphan]:
        def work() -> list[Orphan]:
            cur = self.db.conn.execute(
                f"SELECT {_COLUMNS} FROM orphans WHERE seq > ?1 "
                "AND (?2 IS NULL OR workflow = ?2) AND (?3 IS NULL OR state = ?3) "
                "ORDER BY seq LIMIT ?4",
                (after, workflow, state, limit),
            )
            return [o for o in map(_orphan, cur) if o is not None]

        return await self.db.run(work)

    async def open_counts(self) -> dict[str, int]:
        def work() -> dict[str, int]:
            cur = self.db.conn.execute(
                "SELECT workflow, count(*) FROM orphans WHERE state = 'open' GROUP BY workflow"
            )
            return {str(r[0]): int(r[1]) for r in cur}

        return await self.db.run(work)

    async def history(self, workflow: str, instance_id: str) -> list[OrphanEvent]:
        def work() -> list[OrphanEvent]:
            cur = self.db.conn.execute(
                f"SELECT {_HISTORY} FROM orphan_history WHERE workflow = ? AND instance_id = ? "
                "ORDER BY seq",
                (workflow, instance_id),
            )
            return [_event(r) for r in cur]

        return await self.db.run(work)

    async def ask_termination(
        self,
        workflow: str,
        instance_id: str,
        actor: str,
        on_behalf_of: str | None,
        at: datetime,
    ) -> Orphan | None:
        def work() -> Orphan | None:
            with self.db.transaction() as conn:
                before = _orphan(
                    conn.execute(
                        f"SELECT {_COLUMNS} FROM orphans WHERE workflow = ? AND instance_id = ?",
                        (workflow, instance_id),
                    ).fetchone()
                )
                if before is None or before.state != "open":
                    return before
                conn.execute(
                    "UPDATE orphans SET terminated_by = ?, on_behalf_of = ?, terminated_at = NULL, "
                    "result = NULL WHERE workflow = ? AND instance_id = ?",
                    (actor, on_behalf_of, workflow, instance_id),
                )
                conn.execute(
                    _NOTE,
                    (workflow, instance_id, to_micros(at), "terminate_asked", actor, on_behalf_of,
                     None),
                )  # fmt: skip
            return before

        return await self.db.run(work)

    async def termination_result(
        self, workflow: str, instance_id: str, result: str, detail: str | None, at: datetime
    ) -> Orphan | None:
        if result not in TERMINATION_RESULTS:
            raise ValueError(f"unknown termination result {result!r}")
        state = {"terminated": "terminated", "failed": None}.get(result, "gone")
        shown = f"failed: {detail or 'no detail'}" if result == "failed" else result
        when = to_micros(at)

        def work() -> Orphan | None:
            with self.db.transaction() as conn:
                row = conn.execute(
                    "UPDATE orphans SET state = coalesce(?3, state), result = ?4, "
                    "terminated_at = CASE WHEN ?3 IS NULL THEN terminated_at ELSE ?5 END "
                    f"WHERE workflow = ?1 AND instance_id = ?2 RETURNING {_COLUMNS}",
                    (workflow, instance_id, state, shown, when),
                ).fetchone()
                orphan = _orphan(row)
                if orphan is None:
                    return None
                conn.execute(
                    _NOTE,
                    (workflow, instance_id, when, result, orphan.terminated_by,
                     orphan.on_behalf_of, detail),
                )  # fmt: skip
            return orphan

        return await self.db.run(work)
