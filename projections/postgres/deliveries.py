"""The outcome feed's endpoints and parked entries in PostgreSQL (see the port).

Every write to an endpoint's parked entries is one transaction holding that endpoint's
transaction-level advisory lock, so a park, a retry request, a delivery and a park again on
one endpoint happen one after the other: an entry parked behind its audit's while a retry is
asked for either is asked for too or takes the request from the entry before it, and ``seq``
follows the order in which they committed (``bigserial``: a conflicting entry leaves a gap).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import asyncpg

from projections.deliveries import OutcomeDeliveries
from projections.postgres.connection import PostgresDB, advisory_key
from projections.postgres.rows import replace_nul
from projections.values import ParkedEntry

__all__ = ["PostgresDeliveries"]

_SELECT = (
    "SELECT endpoint, outcome_id, audit_id, partition, body, attempts, error, parked_at, seq, "
    "retry_requested_at, retry_requested_by FROM outcome_parked"
)
# The entry's retry request is that of its audit's latest entry parked on the endpoint.
_PARK = (
    "INSERT INTO outcome_parked (endpoint, outcome_id, audit_id, partition, body, attempts, "
    "error, parked_at, retry_requested_at, retry_requested_by) "
    "SELECT $1, $2, $3, $4, $5, $6, $7, $8, latest.retry_requested_at, "
    "latest.retry_requested_by FROM (SELECT) AS one LEFT JOIN LATERAL (SELECT "
    "retry_requested_at, retry_requested_by FROM outcome_parked WHERE endpoint = $1 "
    "AND audit_id = $3 ORDER BY seq DESC LIMIT 1) AS latest ON true "
    "ON CONFLICT (endpoint, outcome_id) DO NOTHING"
)


def _entry(rec: Sequence[Any]) -> ParkedEntry:
    return ParkedEntry(*rec)


class PostgresDeliveries(OutcomeDeliveries):
    def __init__(self, db: PostgresDB) -> None:
        self.db = db

    async def _lock(self, conn: asyncpg.Connection, endpoints: Iterable[str]) -> None:
        """The endpoints' advisory locks, taken in one order so two writers never deadlock."""
        for endpoint in sorted(set(endpoints)):
            await conn.execute(
                "SELECT pg_advisory_xact_lock($1)",
                advisory_key(f"outcomes:{endpoint}", self.db.schema),
            )

    async def register(self, endpoint: str, target: str, at: datetime) -> datetime:
        with self.db.errors("register an outcome endpoint"):
            first: datetime = await self.db.pool.fetchval(
                "INSERT INTO outcome_endpoints (endpoint, target, registered_at) "
                "VALUES ($1, $2, $3) ON CONFLICT (endpoint) DO UPDATE SET target = excluded.target "
                "RETURNING registered_at",
                replace_nul(endpoint),
                replace_nul(target),
                at,
            )
        return first

    async def park(self, entries: Sequence[ParkedEntry]) -> None:
        if not entries:
            return
        values = [
            (replace_nul(e.endpoint), replace_nul(e.outcome_id), replace_nul(e.audit_id),
             e.partition, replace_nul(e.body), e.attempts, replace_nul(e.error), e.parked_at)
            for e in entries
        ]  # fmt: skip
        with self.db.errors("park outcome entries"):
            async with self.db.pool.acquire() as conn, conn.transaction():
                await self._lock(conn, (v[0] for v in values))
                for value in values:  # one by one: each sees the entries parked before it
                    await conn.execute(_PARK, *value)

    async def parked(
        self, endpoint: str | None = None, *, limit: int = 100, after: int = 0
    ) -> list[ParkedEntry]:
        with self.db.errors("list parked outcome entries"):
            recs = await self.db.pool.fetch(
                f"{_SELECT} WHERE seq > $1 AND ($2::text IS NULL OR endpoint = $2) "
                "ORDER BY seq LIMIT $3",
                after,
                None if endpoint is None else replace_nul(endpoint),
                limit,
            )
        return [_entry(r) for r in recs]

    async def parked_counts(self) -> dict[str, int]:
        with self.db.errors("count parked outcome entries"):
            recs = await self.db.pool.fetch(
                "SELECT endpoint, count(*) FROM outcome_parked GROUP BY endpoint"
            )
        return {r[0]: int(r[1]) for r in recs}

    async def parked_audits(self, endpoint: str, partitions: Iterable[int]) -> set[str]:
        with self.db.errors("list audits with parked outcome entries"):
            recs = await self.db.pool.fetch(
                "SELECT DISTINCT audit_id FROM outcome_parked WHERE endpoint = $1 "
                "AND partition = ANY($2::integer[])",
                replace_nul(endpoint),
                sorted(set(partitions)),
            )
        return {r[0] for r in recs}

    async def request_retry(
        self, endpoint: str | None, outcome_ids: Sequence[str] | None, actor: str, at: datetime
    ) -> int:
        where = None if endpoint is None else replace_nul(endpoint)
        ids = None if outcome_ids is None else [replace_nul(i) for i in outcome_ids]
        with self.db.errors("request the retry of parked outcome entries"):
            async with self.db.pool.acquire() as conn, conn.transaction():
                if where is not None:
                    await self._lock(conn, [where])
                else:
                    recs = await conn.fetch("SELECT DISTINCT endpoint FROM outcome_parked")
                    await self._lock(conn, (r[0] for r in recs))
                status: str = await conn.execute(
                    "UPDATE outcome_parked SET retry_requested_at = $1, retry_requested_by = $2 "
                    "WHERE retry_requested_at IS NULL AND ($3::text IS NULL OR endpoint = $3) "
                    "AND ($4::text[] IS NULL OR (endpoint, audit_id) IN (SELECT endpoint, "
                    "audit_id FROM outcome_parked WHERE ($3::text IS NULL OR endpoint = $3) "
                    "AND outcome_id = ANY($4::text[])))",
                    at,
                    replace_nul(actor),
                    where,
                    ids,
                )
        return int(status.rsplit(" ", 1)[1])

    async def retry_requested(
        self, endpoint: str, partitions: Iterable[int], limit: int = 100
    ) -> list[ParkedEntry]:
        with self.db.errors("list outcome entries to retry"):
            recs = await self.db.pool.fetch(
                f"{_SELECT} WHERE endpoint = $1 AND retry_requested_at IS NOT NULL "
                "AND partition = ANY($2::integer[]) ORDER BY seq LIMIT $3",
                replace_nul(endpoint),
                sorted(set(partitions)),
                limit,
            )
        return [_entry(r) for r in recs]

    async def delivered(self, endpoint: str, outcome_ids: Sequence[str]) -> set[str]:
        where = replace_nul(endpoint)
        with self.db.errors("remove delivered outcome entries"):
            async with self.db.pool.acquire() as conn, conn.transaction():
                await self._lock(conn, [where])
                recs = await conn.fetch(
                    "DELETE FROM outcome_parked WHERE endpoint = $1 "
                    "AND outcome_id = ANY($2::text[]) RETURNING audit_id",
                    where,
                    [replace_nul(i) for i in outcome_ids],
                )
                audits = {r[0] for r in recs}
                left = await conn.fetch(
                    "SELECT DISTINCT audit_id FROM outcome_parked WHERE endpoint = $1 "
                    "AND audit_id = ANY($2::text[])",
                    where,
                    sorted(audits),
                )
        return audits - {r[0] for r in left}

    async def park_again(
        self, endpoint: str, outcome_id: str, attempts: int, error: str, at: datetime
    ) -> None:
        where = replace_nul(endpoint)
        with self.db.errors("park an outcome entry again"):
            async with self.db.pool.acquire() as conn, conn.transaction():
                await self._lock(conn, [where])
                audit_id = await conn.fetchval(
                    "UPDATE outcome_parked SET attempts = $3, error = $4 "
                    "WHERE endpoint = $1 AND outcome_id = $2 RETURNING audit_id",
                    where,
                    replace_nul(outcome_id),
                    attempts,
                    replace_nul(error),
                )
                if audit_id is not None:
                    await conn.execute(
                        "UPDATE outcome_parked SET retry_requested_at = NULL, "
                        "retry_requested_by = NULL WHERE endpoint = $1 AND audit_id = $2",
                        where,
                        audit_id,
                    )
