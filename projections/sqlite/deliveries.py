"""The outcome feed's endpoints and parked entries in SQLite (see the port). Writes are one
``BEGIN IMMEDIATE`` transaction each, so processes sharing the file serialise on its write
lock, and ``seq`` (``AUTOINCREMENT``) only grows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from projections.deliveries import OutcomeDeliveries
from projections.sqlite.connection import SQLiteDB
from projections.sqlite.rows import from_micros, to_micros
from projections.values import ParkedEntry

__all__ = ["SQLiteDeliveries"]

_SELECT = (
    "SELECT endpoint, outcome_id, audit_id, partition, body, attempts, error, parked_at, seq, "
    "retry_requested_at, retry_requested_by FROM outcome_parked"
)
# The entry's retry request is that of its audit's latest entry parked on the endpoint.
_PARK = (
    "INSERT INTO outcome_parked (endpoint, outcome_id, audit_id, partition, body, attempts, "
    "error, parked_at, retry_requested_at, retry_requested_by) "
    "SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, latest.retry_requested_at, "
    "latest.retry_requested_by FROM (SELECT 1) LEFT JOIN (SELECT retry_requested_at, "
    "retry_requested_by FROM outcome_parked WHERE endpoint = ?1 AND audit_id = ?3 "
    "ORDER BY seq DESC LIMIT 1) AS latest "
    "ON true WHERE true ON CONFLICT (endpoint, outcome_id) DO NOTHING"
)
# A list of values bound as one JSON array (SQLite's limit on bound parameters never reached).
_EACH = "(SELECT value FROM json_each(?))"


def _entry(row: Sequence[Any]) -> ParkedEntry:
    endpoint, outcome_id, audit_id, partition, body, attempts, error, parked_at, seq, at, by = row
    parked = from_micros(parked_at)
    assert parked is not None  # NOT NULL
    return ParkedEntry(
        endpoint, outcome_id, audit_id, partition, body, attempts, error, parked, seq,
        from_micros(at), by,
    )  # fmt: skip


class SQLiteDeliveries(OutcomeDeliveries):
    def __init__(self, db: SQLiteDB) -> None:
        self.db = db

    async def register(self, endpoint: str, target: str, at: datetime) -> datetime:
        def work() -> datetime:
            with self.db.transaction() as conn:
                row = conn.execute(
                    "INSERT INTO outcome_endpoints VALUES (?, ?, ?) ON CONFLICT (endpoint) "
                    "DO UPDATE SET target = excluded.target RETURNING registered_at",
                    (endpoint, target, to_micros(at)),
                ).fetchone()
            first = from_micros(row[0])
            assert first is not None  # NOT NULL
            return first

        return await self.db.run(work)

    async def park(self, entries: Sequence[ParkedEntry]) -> None:
        if not entries:
            return
        values = [
            (e.endpoint, e.outcome_id, e.audit_id, e.partition, e.body, e.attempts, e.error,
             to_micros(e.parked_at))
            for e in entries
        ]  # fmt: skip

        def work() -> None:
            with self.db.transaction() as conn:
                for value in values:  # one by one: each sees the entries parked before it
                    conn.execute(_PARK, value)

        await self.db.run(work)

    async def parked(
        self, endpoint: str | None = None, *, limit: int = 100, after: int = 0
    ) -> list[ParkedEntry]:
        def work() -> list[ParkedEntry]:
            cur = self.db.conn.execute(
                f"{_SELECT} WHERE seq > ? AND (?2 IS NULL OR endpoint = ?2) ORDER BY seq LIMIT ?3",
                (after, endpoint, limit),
            )
            return [_entry(r) for r in cur]

        return await self.db.run(work)

    async def parked_counts(self) -> dict[str, int]:
        def work() -> dict[str, int]:
            cur = self.db.conn.execute(
                "SELECT endpoint, count(*) FROM outcome_parked GROUP BY endpoint"
            )
            return {str(r[0]): int(r[1]) for r in cur}

        return await self.db.run(work)

    async def parked_audits(self, endpoint: str, partitions: Iterable[int]) -> set[str]:
        wanted = json.dumps(sorted(set(partitions)))

        def work() -> set[str]:
            cur = self.db.conn.execute(
                "SELECT DISTINCT audit_id FROM outcome_parked WHERE endpoint = ? "
                f"AND partition IN {_EACH}",
                (endpoint, wanted),
            )
            return {r[0] for r in cur}

        return await self.db.run(work)

    async def request_retry(
        self, endpoint: str | None, outcome_ids: Sequence[str] | None, actor: str, at: datetime
    ) -> int:
        update = (
            "UPDATE outcome_parked SET retry_requested_at = ?1, retry_requested_by = ?2 "
            "WHERE retry_requested_at IS NULL AND (?3 IS NULL OR endpoint = ?3)"
        )
        if outcome_ids is not None:  # each named entry's audit, on the entry's endpoint
            update += (
                " AND (endpoint, audit_id) IN (SELECT endpoint, audit_id FROM outcome_parked "
                "WHERE (?3 IS NULL OR endpoint = ?3) "
                "AND outcome_id IN (SELECT value FROM json_each(?4)))"
            )
        values: tuple[Any, ...] = (to_micros(at), actor, endpoint)
        if outcome_ids is not None:
            values += (json.dumps(list(outcome_ids)),)

        def work() -> int:
            with self.db.transaction() as conn:
                return conn.execute(update, values).rowcount

        return await self.db.run(work)

    async def retry_requested(
        self, endpoint: str, partitions: Iterable[int], limit: int = 100
    ) -> list[ParkedEntry]:
        wanted = json.dumps(sorted(set(partitions)))

        def work() -> list[ParkedEntry]:
            cur = self.db.conn.execute(
                f"{_SELECT} WHERE endpoint = ? AND retry_requested_at IS NOT NULL "
                f"AND partition IN {_EACH} ORDER BY seq LIMIT ?",
                (endpoint, wanted, limit),
            )
            return [_entry(r) for r in cur]

        return await self.db.run(work)

    async def delivered(self, endpoint: str, outcome_ids: Sequence[str]) -> set[str]:
        ids = json.dumps(list(outcome_ids))

        def work() -> set[str]:
            with self.db.transaction() as conn:
                cur = conn.execute(
                    f"DELETE FROM outcome_parked WHERE endpoint = ? AND outcome_id IN {_EACH} "
                    "RETURNING audit_id",
                    (endpoint, ids),
                )
                audits = {r[0] for r in cur}
                left = conn.execute(
                    "SELECT DISTINCT audit_id FROM outcome_parked WHERE endpoint = ? "
                    f"AND audit_id IN {_EACH}",
                    (endpoint, json.dumps(sorted(audits))),
                )
                return audits - {r[0] for r in left}

        return await self.db.run(work)

    async def park_again(
        self, endpoint: str, outcome_id: str, attempts: int, error: str, at: datetime
    ) -> None:
        def work() -> None:
            with self.db.transaction() as conn:
                conn.execute(
                    "UPDATE outcome_parked SET attempts = ?, error = ? "
                    "WHERE endpoint = ? AND outcome_id = ?",
                    (attempts, error, endpoint, outcome_id),
                )
                conn.execute(
                    "UPDATE outcome_parked SET retry_requested_at = NULL, "
                    "retry_requested_by = NULL WHERE endpoint = ?1 AND audit_id = "
                    "(SELECT audit_id FROM outcome_parked WHERE endpoint = ?1 AND outcome_id = ?2)",
                    (endpoint, outcome_id),
                )

        await self.db.run(work)
