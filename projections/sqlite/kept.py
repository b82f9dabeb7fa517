"""History set aside for a rebuild over a trimmed log, in SQLite (see the port): a table of its
own, ``rebuild_kept``, which a reset does not empty and only the finished rebuild drops."""

from __future__ import annotations

from collections.abc import Mapping

from projections.kept import KeptHistory
from projections.sqlite.connection import SQLiteDB
from projections.values import Position

__all__ = ["SQLiteKeptHistory"]

# Keyed as the history is, by (event_id, audit_id): set aside twice, an event is kept once.
_CREATE = (
    "CREATE TABLE IF NOT EXISTS rebuild_kept (n INTEGER PRIMARY KEY AUTOINCREMENT, "
    "seq INTEGER NOT NULL, event_id TEXT NOT NULL, audit_id TEXT NOT NULL, body TEXT NOT NULL, "
    'topic TEXT, partition INTEGER, "offset" INTEGER, UNIQUE (event_id, audit_id))'
)


class SQLiteKeptHistory(KeptHistory):
    def __init__(self, db: SQLiteDB) -> None:
        self.db = db

    async def keep_history(self, before: Mapping[tuple[str, int], int]) -> int:
        def work() -> int:
            with self.db.transaction() as conn:
                conn.execute(_CREATE)
                for (topic, partition), offset in before.items():
                    conn.execute(
                        "INSERT OR IGNORE INTO rebuild_kept (seq, event_id, audit_id, body, "
                        'topic, partition, "offset") SELECT seq, event_id, audit_id, body, '
                        'topic, partition, "offset" FROM audit_events WHERE topic = ? AND '
                        'partition = ? AND "offset" < ? ORDER BY seq',
                        (topic, partition, offset),
                    )
                return int(conn.execute("SELECT count(*) FROM rebuild_kept").fetchone()[0])

        return await self.db.run(work)

    async def kept_history(self, after: int, limit: int) -> list[tuple[int, bytes, Position]]:
        def work() -> list[tuple[int, bytes, Position]]:
            rows = self.db.conn.execute(
                'SELECT n, body, topic, partition, "offset" FROM rebuild_kept WHERE n > ? '
                "ORDER BY n LIMIT ?",
                (after, limit),
            ).fetchall()
            return [(n, body.encode(), (t, p, o)) for n, body, t, p, o in rows]

        return await self.db.run(work)

    async def drop_kept_history(self) -> None:
        def work() -> None:
            with self.db.transaction() as conn:
                conn.execute("DROP TABLE IF EXISTS rebuild_kept")

        await self.db.run(work)
