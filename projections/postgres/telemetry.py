"""The telemetry outbox's sent events in PostgreSQL (see the port). Event ids are ``uuid``: a
string that is not a UUID matches nothing, and marking one as sent is a non-retriable error.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime

from projections.postgres.connection import PostgresDB
from projections.postgres.rows import event_uuids
from projections.telemetry import SentTelemetry
from statemachine.errors import StoreError

__all__ = ["PostgresTelemetry"]


class PostgresTelemetry(SentTelemetry):
    def __init__(self, db: PostgresDB) -> None:
        self.db = db

    async def telemetry_sent(self, event_ids: Iterable[str]) -> set[str]:
        asked: dict[uuid.UUID, set[str]] = {}
        for raw in event_ids:
            for key in event_uuids([raw]):
                asked.setdefault(key, set()).add(raw)
        if not asked:
            return set()
        with self.db.errors("read sent telemetry"):
            recs = await self.db.pool.fetch(
                "SELECT event_id FROM telemetry_sent WHERE event_id = ANY($1::uuid[])",
                list(asked),
            )
        return {raw for r in recs for raw in asked[r[0]]}

    async def mark_telemetry_sent(self, event_id: str, at: datetime) -> None:
        try:
            key = uuid.UUID(str(event_id))
        except ValueError:
            raise StoreError(
                f"telemetry event id {event_id!r} is not a UUID", retriable=False
            ) from None
        with self.db.errors("mark telemetry sent"):
            await self.db.pool.execute(
                "INSERT INTO telemetry_sent (event_id, sent_at) VALUES ($1, $2) "
                "ON CONFLICT (event_id) DO NOTHING",
                key,
                at,
            )
