"""The projector's write in PostgreSQL (see the port). Concurrency of
:meth:`PostgresWriter.apply`: one projector owns a partition (Kafka consumer group) and an
audit lives in one partition, so writers normally never meet, and ``apply`` takes no row locks
up front. They may meet during a rebalance or a rebuild; correctness does not depend on
ownership: a row is written only if it still has the ``version`` it was folded from, a new
row only if nobody inserted it meanwhile, and an event only once (unique
``(event_id, audit_id)``: :mod:`statemachine.idempotency`). A lost
race aborts the whole transaction with a *retriable* :class:`StoreError`; the retry reloads
and skips what the other writer applied. A batch that applied something notifies readers
waiting for a change (``changes.py``) as it commits.

``reset()`` truncates (it briefly blocks readers of the projection), and turns a history body
still kept as ``jsonb`` (schema.py, migration 4) into ``json``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from projections.postgres.batch import apply_batch
from projections.postgres.connection import PostgresDB
from projections.postgres.schema import BODY_AS_JSON
from projections.values import ApplyResult, Position
from projections.writer import OnConflicts, ProjectionWriter
from statemachine.errors import StoreError
from statemachine.events import AuditEvent

__all__ = ["PostgresWriter"]


class PostgresWriter(ProjectionWriter):
    def __init__(self, db: PostgresDB, channel: str) -> None:
        self.db = db
        self.channel = channel
        """Where a batch that applied something is announced."""

    async def apply(
        self,
        events: Sequence[tuple[AuditEvent, Position]],
        offsets: Mapping[tuple[str, int], int],
        consumer: str,
        bodies: Sequence[bytes | None] | None = None,
        on_conflicts: OnConflicts | None = None,
    ) -> ApplyResult:
        """One transaction of a handful of statements, whatever the batch size: load the
        affected rows (``= ANY``); stream the history with binary ``COPY`` while folding, so
        folding overlaps the server's work (an event recorded before makes the unique
        ``(event_id, audit_id)`` refuse the copy, which is then made again without the
        recorded events, duplicates and conflicts);
        write each changed audit once (``COPY`` into a temporary table, then one ``UPDATE``
        guarded by the version each row was folded from and one ``INSERT`` for new audits);
        upsert the offsets. A lost race with another writer is a
        retriable :class:`StoreError`.
        """
        now = datetime.now(UTC)
        with self.db.errors(f"apply {len(events)} events"):
            async with self.db.pool.acquire() as conn, conn.transaction():
                applied, lost, conflicts = await apply_batch(
                    conn, self.db.schema, events, offsets, consumer, bodies, now
                )
                if lost:  # raised inside the transaction: nothing of the batch is kept
                    raise StoreError(
                        f"PostgreSQL {self.db.where} (schema {self.db.schema}): another writer "
                        f"changed {lost} audits of this batch concurrently; retry",
                        retriable=True,
                    )
                if conflicts and on_conflicts is not None:
                    await on_conflicts(conflicts)
                if applied:  # readers waiting for an outcome look again at commit
                    await conn.execute("SELECT pg_notify($1, '')", self.channel)
        return ApplyResult(
            applied=applied,
            skipped=len(events) - applied - len(conflicts),
            conflicts=tuple(conflicts),
        )

    async def stored_offsets(self, consumer: str) -> dict[tuple[str, int], int]:
        with self.db.errors("read offsets"):
            recs = await self.db.pool.fetch(
                "SELECT topic, partition, next_offset FROM projector_offsets WHERE consumer = $1",
                consumer,
            )
        return {(t, p): n for t, p, n in recs}

    async def reset(self, consumer: str) -> None:
        with self.db.errors("reset"):
            async with self.db.pool.acquire() as conn, conn.transaction():
                await conn.execute("TRUNCATE audits, audit_events")
                await conn.execute(BODY_AS_JSON)  # instant on the empty table
                await conn.execute("DELETE FROM projector_offsets WHERE consumer = $1", consumer)
