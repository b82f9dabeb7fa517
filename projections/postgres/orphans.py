"""The watched workflows and their orphans in PostgreSQL (see the port). A scan's record and a
termination's are one transaction each; an orphan's row is locked (``FOR UPDATE``) while its
state changes, so a scan and a termination of the same orphan take turns."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from projections.orphans import TERMINATION_RESULTS, OrphanInstances
from projections.postgres.connection import PostgresDB
from projections.postgres.rows import replace_nul
from projections.values import Orphan, OrphanEvent, OrphanScanRecord, OrphanSighting

__all__ = ["PostgresOrphans"]

_COLUMNS = (
    "workflow, instance_id, created_on, status, first_seen, last_seen, state, terminated_at, "
    "terminated_by, on_behalf_of, result, seq"
)
_HISTORY = "workflow, instance_id, at, kind, actor, on_behalf_of, detail, seq"
_NOTE = (
    "INSERT INTO orphan_history (workflow, instance_id, at, kind, actor, on_behalf_of, detail) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7)"
)


def _orphan(rec: Sequence[Any] | None) -> Orphan | None:
    return None if rec is None else Orphan(*rec)


class PostgresOrphans(OrphanInstances):
    def __init__(self, db: PostgresDB) -> None:
        self.db = db

    async def watch(self, workflows: Sequence[str], at: datetime) -> dict[str, datetime]:
        names = sorted({replace_nul(w) for w in workflows})
        with self.db.errors("register watched workflows"):
            async with self.db.pool.acquire() as conn, conn.transaction():
                await conn.execute(
                    "INSERT INTO watched_workflows (workflow, since) "
                    "SELECT unnest($1::text[]), $2 ON CONFLICT (workflow) DO NOTHING",
                    names,
                    at,
                )
                recs = await conn.fetch(
                    "SELECT workflow, since FROM watched_workflows "
                    "WHERE workflow = ANY($1::text[])",
                    names,
                )
        return {r[0]: r[1] for r in recs}

    async def watched(self) -> dict[str, datetime]:
        with self.db.errors("read the watched workflows"):
            recs = await self.db.pool.fetch("SELECT workflow, since FROM watched_workflows")
        return {r[0]: r[1] for r in recs}

    async def held(self, instance_ids: Sequence[str]) -> set[str]:
        if not instance_ids:
            return set()
        with self.db.errors("look up the instances audits hold"):
            recs = await self.db.pool.fetch(
                "SELECT DISTINCT workflow_instance_id FROM audits "
                "WHERE workflow_instance_id = ANY($1::text[])",
                sorted({replace_nul(i) for i in instance_ids}),
            )
        return {r[0] for r in recs}

    async def record_scan(
        self, workflow: str, found: Sequence[OrphanSighting], at: datetime
    ) -> OrphanScanRecord:
        wf = replace_nul(workflow)
        new: list[str] = []
        with self.db.errors("record an orphan scan"):
            async with self.db.pool.acquire() as conn, conn.transaction():
                seen_ids: list[str] = []
                for sighting in found:
                    iid = replace_nul(sighting.instance_id)
                    seen_ids.append(iid)
                    status = replace_nul(sighting.status)
                    before = await conn.fetchrow(
                        "SELECT state, status FROM orphans WHERE workflow = $1 "
                        "AND instance_id = $2 FOR UPDATE",
                        wf,
                        iid,
                    )
                    if before is None:
                        await conn.execute(
                            "INSERT INTO orphans (workflow, instance_id, created_on, status, "
                            "first_seen, last_seen, state) VALUES ($1, $2, $3, $4, $5, $5, 'open')",
                            wf, iid, sighting.created_on, status, at,
                        )  # fmt: skip
                        await conn.execute(_NOTE, wf, iid, at, "found", None, None, status)
                        new.append(sighting.instance_id)
                        continue
                    state = before[0] if before[0] == "terminated" else "open"
                    await conn.execute(
                        "UPDATE orphans SET status = $3, last_seen = greatest(last_seen, $4), "
                        "state = $5 WHERE workflow = $1 AND instance_id = $2",
                        wf, iid, status, at, state,
                    )  # fmt: skip
                    if before[0] == "gone":
                        await conn.execute(_NOTE, wf, iid, at, "found", None, None, status)
                        new.append(sighting.instance_id)
                    elif before[1] != status:
                        await conn.execute(_NOTE, wf, iid, at, "seen", None, None, status)
                recs = await conn.fetch(
                    "UPDATE orphans AS o SET state = 'gone' WHERE o.workflow = $1 "
                    "AND o.state = 'open' AND NOT (o.instance_id = ANY($2::text[])) "
                    "RETURNING o.instance_id, EXISTS (SELECT FROM audits "
                    "WHERE audits.workflow_instance_id = o.instance_id)",
                    wf,
                    seen_ids,
                )
                gone = sorted(r[0] for r in recs if not r[1])
                adopted = sorted(r[0] for r in recs if r[1])
                for kind, ids in (("gone", gone), ("adopted", adopted)):
                    for iid in ids:
                        await conn.execute(_NOTE, wf, iid, at, kind, None, None, None)
                still: int = await conn.fetchval(
                    "SELECT count(*) FROM orphans WHERE workflow = $1 AND state = 'open'", wf
                )
        return OrphanScanRecord(new, gone, adopted, int(still))

    async def get(self, workflow: str, instance_id: str) -> Orphan | None:
        with self.db.errors("read an orphan"):
            rec = await self.db.pool.fetchrow(
                f"SELECT {_COLUMNS} FROM orphans WHERE workflow = $1 AND instance_id = $2",
                replace_nul(workflow),
                replace_nul(instance_id),
            )
        return _orphan(rec)

    async def page(
        self,
        workflow: str | None = None,
        *,
        state: str | None = "open",
        limit: int = 100,
        after: int = 0,
    ) -> list[Orphan]:
        with self.db.errors("list orphans"):
            recs = await self.db.pool.fetch(
                f"SELECT {_COLUMNS} FROM orphans WHERE seq > $1 "
                "AND ($2::text IS NULL OR workflow = $2) AND ($3::text IS NULL OR state = $3) "
                "ORDER BY seq LIMIT $4",
                after,
                None if workflow is None else replace_nul(workflow),
                state,
                limit,
            )
        return [Orphan(*r) for r in recs]

    async def open_counts(self) -> dict[str, int]:
        with self.db.errors("count orphans"):
            recs = await self.db.pool.fetch(
                "SELECT workflow, count(*) FROM orphans WHERE state = 'open' GROUP BY workflow"
            )
        return {r[0]: int(r[1]) for r in recs}

    async def history(self, workflow: str, instance_id: str) -> list[OrphanEvent]:
        with self.db.errors("read an orphan's history"):
            recs = await self.db.pool.fetch(
                f"SELECT {_HISTORY} FROM orphan_history WHERE workflow = $1 "
                "AND instance_id = $2 ORDER BY seq",
                replace_nul(workflow),
                replace_nul(instance_id),
            )
        return [OrphanEvent(*r) for r in recs]

    async def ask_termination(
        self,
        workflow: str,
        instance_id: str,
        actor: str,
        on_behalf_of: str | None,
        at: datetime,
    ) -> Orphan | None:
        wf, iid = replace_nul(workflow), replace_nul(instance_id)
        who = replace_nul(actor)
        behalf = None if on_behalf_of is None else replace_nul(on_behalf_of)
        with self.db.errors("ask for an orphan's termination"):
            async with self.db.pool.acquire() as conn, conn.transaction():
                before = _orphan(
                    await conn.fetchrow(
                        f"SELECT {_COLUMNS} FROM orphans WHERE workflow = $1 "
                        "AND instance_id = $2 FOR UPDATE",
                        wf,
                        iid,
                    )
                )
                if before is None or before.state != "open":
                    return before
                await conn.execute(
                    "UPDATE orphans SET terminated_by = $3, on_behalf_of = $4, "
                    "terminated_at = NULL, result = NULL WHERE workflow = $1 AND instance_id = $2",
                    wf, iid, who, behalf,
                )  # fmt: skip
                await conn.execute(_NOTE, wf, iid, at, "terminate_asked", who, behalf, None)
        return before

    async def termination_result(
        self, workflow: str, instance_id: str, result: str, detail: str | None, at: datetime
    ) -> Orphan | None:
        if result not in TERMINATION_RESULTS:
            raise ValueError(f"unknown termination result {result!r}")
        wf, iid = replace_nul(workflow), replace_nul(instance_id)
        note = None if detail is None else replace_nul(detail)
        state = {"terminated": "terminated", "failed": None}.get(result, "gone")
        shown = f"failed: {note or 'no detail'}" if result == "failed" else result
        with self.db.errors("record an orphan's termination"):
            async with self.db.pool.acquire() as conn, conn.transaction():
                rec = await conn.fetchrow(
                    "UPDATE orphans SET state = coalesce($3, state), result = $4, "
                    "terminated_at = CASE WHEN $3::text IS NULL THEN terminated_at ELSE $5 END "
                    f"WHERE workflow = $1 AND instance_id = $2 RETURNING {_COLUMNS}",
                    wf, iid, state, shown, at,
                )  # fmt: skip
                if rec is None:
                    return None
                await conn.execute(
                    _NOTE, wf, iid, at, result, rec["terminated_by"], rec["on_behalf_of"], note
                )
        return _orphan(rec)
