"""Checkpoints of stateful consumers in SQLite (see the port): one row per consumer and
partition, replaced on each save."""

from __future__ import annotations

from datetime import UTC, datetime

from projections.checkpoints import CheckpointStore
from projections.sqlite.connection import SQLiteDB
from projections.sqlite.rows import to_micros

__all__ = ["SQLiteCheckpoints"]


class SQLiteCheckpoints(CheckpointStore):
    def __init__(self, db: SQLiteDB) -> None:
        self.db = db

    async def save_checkpoint(
        self, consumer: str, topic: str, partition: int, next_offset: int, state: bytes
    ) -> None:
        def work() -> None:
            with self.db.transaction() as conn:
                conn.execute(
                    "INSERT INTO checkpoints VALUES (?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (consumer, topic, partition) DO UPDATE SET "
                    "next_offset = excluded.next_offset, state = excluded.state, "
                    "saved_at = excluded.saved_at",
                    (consumer, topic, partition, next_offset, state, to_micros(datetime.now(UTC))),
                )

        await self.db.run(work)

    async def load_checkpoint(
        self, consumer: str, topic: str, partition: int
    ) -> tuple[int, bytes] | None:
        def work() -> tuple[int, bytes] | None:
            row = self.db.conn.execute(
                "SELECT next_offset, state FROM checkpoints "
                "WHERE consumer = ? AND topic = ? AND partition = ?",
                (consumer, topic, partition),
            ).fetchone()
            return (int(row[0]), bytes(row[1])) if row is not None else None

        return await self.db.run(work)

    async def checkpoint_offsets(self, consumer: str, topic: str) -> dict[int, int]:
        def work() -> dict[int, int]:
            rows = self.db.conn.execute(
                "SELECT partition, next_offset FROM checkpoints WHERE consumer = ? AND topic = ?",
                (consumer, topic),
            ).fetchall()
            return {int(r[0]): int(r[1]) for r in rows}

        return await self.db.run(work)
