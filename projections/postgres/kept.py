"""History set aside for a rebuild over a trimmed log, in PostgreSQL (see the port): a table of
its own, ``rebuild_kept``, which a reset does not empty and only the finished rebuild drops."""

from __future__ import annotations

from collections.abc import Mapping

from projections.kept import KeptHistory
from projections.postgres.connection import PostgresDB
from projections.values import Position

__all__ = ["PostgresKeptHistory"]

# Keyed as the history is, by (event_id, audit_id): set aside twice, an event is kept once.
_CREATE = (
    "CREATE TABLE IF NOT EXISTS rebuild_kept (n bigserial PRIMARY KEY, seq bigint NOT NULL, "
    "event_id uuid NOT NULL, audit_id text NOT NULL, body jsonb NOT NULL, topic text, "
    'partition integer, "offset" bigint, UNIQUE (event_id, audit_id))'
)
_KEEP = (
    'INSERT INTO rebuild_kept (seq, event_id, audit_id, body, topic, partition, "offset") '
    'SELECT e.seq, e.event_id, e.audit_id, e.body, e.topic, e.partition, e."offset" '
    "FROM audit_events e "
    "JOIN unnest($1::text[], $2::integer[], $3::bigint[]) AS k(topic, partition, before) "
    'ON e.topic = k.topic AND e.partition = k.partition AND e."offset" < k.before '
    "ORDER BY e.seq ON CONFLICT (event_id, audit_id) DO NOTHING"
)


class PostgresKeptHistory(KeptHistory):
    def __init__(self, db: PostgresDB) -> None:
        self.db = db

    async def keep_history(self, before: Mapping[tuple[str, int], int]) -> int:
        keys = list(before)
        with self.db.errors("set history aside"):
            async with self.db.pool.acquire() as conn, conn.transaction():
                await conn.execute(_CREATE)
                await conn.execute(
                    _KEEP,
                    [t for t, _ in keys],
                    [p for _, p in keys],
                    [before[k] for k in keys],
                )
                return int(await conn.fetchval("SELECT count(*) FROM rebuild_kept"))

    async def kept_history(self, after: int, limit: int) -> list[tuple[int, bytes, Position]]:
        with self.db.errors("read the history set aside"):
            recs = await self.db.pool.fetch(
                'SELECT n, body::text, topic, partition, "offset" FROM rebuild_kept '
                "WHERE n > $1 ORDER BY n LIMIT $2",
                after,
                limit,
            )
        return [(n, body.encode(), (t, p, o)) for n, body, t, p, o in recs]

    async def drop_kept_history(self) -> None:
        with self.db.errors("drop the history set aside"):
            await self.db.pool.execute("DROP TABLE IF EXISTS rebuild_kept")
