"""History set aside for a rebuild over a trimmed log, in PostgreSQL (see the port): a table of
its own, ``rebuild_kept``, which a reset does not empty and only the finished rebuild drops."""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Mapping

import asyncpg

from projections.values import Position

__all__ = ["PostgresKeptHistory"]

_CREATE = (
    "CREATE TABLE IF NOT EXISTS rebuild_kept (n bigserial PRIMARY KEY, seq bigint NOT NULL, "
    'event_id uuid NOT NULL UNIQUE, body jsonb NOT NULL, topic text, partition integer, "offset" '
    "bigint)"
)
_KEEP = (
    'INSERT INTO rebuild_kept (seq, event_id, body, topic, partition, "offset") '
    'SELECT e.seq, e.event_id, e.body, e.topic, e.partition, e."offset" FROM audit_events e '
    "JOIN unnest($1::text[], $2::integer[], $3::bigint[]) AS k(topic, partition, before) "
    'ON e.topic = k.topic AND e.partition = k.partition AND e."offset" < k.before '
    "ORDER BY e.seq ON CONFLICT (event_id) DO NOTHING"
)


class PostgresKeptHistory(ABC):
    @property
    @abstractmethod
    def pool(self) -> asyncpg.Pool: ...

    @abstractmethod
    def _errors(self, what: str) -> contextlib.AbstractContextManager[None]: ...

    async def keep_history(self, before: Mapping[tuple[str, int], int]) -> int:
        keys = list(before)
        with self._errors("set history aside"):
            async with self.pool.acquire() as conn, conn.transaction():
                await conn.execute(_CREATE)
                await conn.execute(
                    _KEEP,
                    [t for t, _ in keys],
                    [p for _, p in keys],
                    [before[k] for k in keys],
                )
                return int(await conn.fetchval("SELECT count(*) FROM rebuild_kept"))

    async def kept_history(self, after: int, limit: int) -> list[tuple[int, bytes, Position]]:
        with self._errors("read the history set aside"):
            recs = await self.pool.fetch(
                'SELECT n, body::text, topic, partition, "offset" FROM rebuild_kept '
                "WHERE n > $1 ORDER BY n LIMIT $2",
                after,
                limit,
            )
        return [(n, body.encode(), (t, p, o)) for n, body, t, p, o in recs]

    async def drop_kept_history(self) -> None:
        with self._errors("drop the history set aside"):
            await self.pool.execute("DROP TABLE IF EXISTS rebuild_kept")
