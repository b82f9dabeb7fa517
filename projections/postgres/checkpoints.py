"""Checkpoints of stateful consumers in PostgreSQL (see the port): one row per consumer and
partition, replaced on each save."""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod

import asyncpg

__all__ = ["PostgresCheckpoints"]


class PostgresCheckpoints(ABC):
    @property
    @abstractmethod
    def pool(self) -> asyncpg.Pool: ...

    @abstractmethod
    def _errors(self, what: str) -> contextlib.AbstractContextManager[None]: ...

    async def save_checkpoint(
        self, consumer: str, topic: str, partition: int, next_offset: int, state: bytes
    ) -> None:
        with self._errors("save a checkpoint"):
            await self.pool.execute(
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
        with self._errors("load a checkpoint"):
            rec = await self.pool.fetchrow(
                "SELECT next_offset, state FROM checkpoints "
                "WHERE consumer = $1 AND topic = $2 AND partition = $3",
                consumer,
                topic,
                partition,
            )
        return (int(rec[0]), bytes(rec[1])) if rec is not None else None

    async def checkpoint_offsets(self, consumer: str, topic: str) -> dict[int, int]:
        with self._errors("read checkpoint offsets"):
            recs = await self.pool.fetch(
                "SELECT partition, next_offset FROM checkpoints WHERE consumer = $1 AND topic = $2",
                consumer,
                topic,
            )
        return {int(r[0]): int(r[1]) for r in recs}
