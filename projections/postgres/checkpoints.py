"""Checkpoints of stateful consumers in PostgreSQL (see the port): one row per consumer and
partition, replaced on each save."""

from __future__ import annotations

from projections.checkpoints import CheckpointStore
from projections.postgres.connection import PostgresDB

__all__ = ["PostgresCheckpoints"]


class PostgresCheckpoints(CheckpointStore):
    def __init__(self, db: PostgresDB) -> None:
        self.db = db

    async def save_checkpoint(
        self, consumer: str, topic: str, partition: int, next_offset: int, state: bytes
    ) -> None:
        with self.db.errors("save a checkpoint"):
            await self.db.pool.execute(
                "INSERT INTO checkpoints VALUES ($1, $2, $3, $4, $5, now()) "
                "ON CONFLICT (consumer, topic, partition) DO UPDATE SET "
                "next_offset = excluded.next_offset, state = excluded.state, "
                "saved_at = excluded.saved_at",
                consumer,
                topic,
                partition,
                next_offset,
                state,
            )

    async def load_checkpoint(
        self, consumer: str, topic: str, partition: int
    ) -> tuple[int, bytes] | None:
        with self.db.errors("load a checkpoint"):
            rec = await self.db.pool.fetchrow(
                "SELECT next_offset, state FROM checkpoints "
                "WHERE consumer = $1 AND topic = $2 AND partition = $3",
                consumer,
                topic,
                partition,
            )
        return (int(rec[0]), bytes(rec[1])) if rec is not None else None

    async def checkpoint_offsets(self, consumer: str, topic: str) -> dict[int, int]:
        with self.db.errors("read checkpoint offsets"):
            recs = await self.db.pool.fetch(
                "SELECT partition, next_offset FROM checkpoints WHERE consumer = $1 AND topic = $2",
                consumer,
                topic,
            )
        return {int(r[0]): int(r[1]) for r in recs}
