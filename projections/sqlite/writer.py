"""The projector's write in SQLite (see the port): a batch (``batch.py``) in one
``BEGIN IMMEDIATE`` transaction, the offsets read back, and the reset a rebuild starts from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from projections.sqlite.batch import apply_batch
from projections.sqlite.connection import SQLiteDB
from projections.sqlite.rows import to_micros
from projections.values import ApplyResult, Position
from projections.writer import OnConflicts, ProjectionWriter
from statemachine.events import AuditEvent

__all__ = ["SQLiteWriter"]


class _Held(Exception):
    """A batch rolled back because it holds conflicts, to be set aside before it commits."""

    def __init__(self, conflicts: tuple[tuple[int, str], ...]) -> None:
        super().__init__(f"{len(conflicts)} conflicts")
        self.conflicts = conflicts


class SQLiteWriter(ProjectionWriter):
    def __init__(self, db: SQLiteDB) -> None:
        self.db = db

    def _apply(
        self,
        events: Sequence[tuple[AuditEvent, Position]],
        offsets: Mapping[tuple[str, int], int],
        consumer: str,
        bodies: Sequence[bytes | None] | None,
        commit_conflicts: bool,
    ) -> ApplyResult:
        """The batch in one transaction; one holding conflicts is rolled back unless
        ``commit_conflicts`` (:class:`_Held`: the caller sets them aside first, the
        transaction runs in a worker thread that cannot wait for it)."""
        now = to_micros(datetime.now(UTC)) or 0
        with self.db.transaction() as conn:
            result = apply_batch(conn, events, offsets, consumer, bodies, now)
            if result.conflicts and not commit_conflicts:
                raise _Held(result.conflicts)
            return result

    async def apply(
        self,
        events: Sequence[tuple[AuditEvent, Position]],
        offsets: Mapping[tuple[str, int], int],
        consumer: str,
        bodies: Sequence[bytes | None] | None = None,
        on_conflicts: OnConflicts | None = None,
    ) -> ApplyResult:
        try:
            return await self.db.run(
                self._apply, events, offsets, consumer, bodies, on_conflicts is None
            )
        except _Held as held:  # rare: the batch again, once its conflicts are set aside
            assert on_conflicts is not None
            await on_conflicts(held.conflicts)
            return await self.db.run(self._apply, events, offsets, consumer, bodies, True)

    async def stored_offsets(self, consumer: str) -> dict[tuple[str, int], int]:
        def work() -> dict[tuple[str, int], int]:
            cur = self.db.conn.execute(
                "SELECT topic, partition, next_offset FROM projector_offsets WHERE consumer = ?",
                (consumer,),
            )
            return {(t, p): n for t, p, n in cur}

        return await self.db.run(work)

    async def reset(self, consumer: str) -> None:
        def work() -> None:
            with self.db.transaction() as conn:
                conn.execute("DELETE FROM audits")
                conn.execute("DELETE FROM audit_events")
                conn.execute("DELETE FROM projector_offsets WHERE consumer = ?", (consumer,))

        await self.db.run(work)
