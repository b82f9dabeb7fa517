"""One batch of events applied to PostgreSQL inside the caller's transaction, in a handful
of statements whatever its size: load the affected rows (``= ANY``); stream the history with
binary ``COPY`` (encoded by ``history_copy.py``) while folding, so folding overlaps the
server's work, the unique ``(event_id, audit_id)`` skipping what was recorded before and
telling conflicts apart (see :func:`apply_batch`); write each changed audit once (``COPY`` into
a temporary table, then one ``UPDATE`` guarded by the version each row was folded from and one
``INSERT`` for new audits, which the primary key refuses when another writer inserted one
meanwhile); upsert the consumer's offsets.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime

import asyncpg

from projections.postgres.history_copy import COLUMNS, HistoryEncoder
from projections.postgres.rows import (
    load_rows,
    recorded,
    replace_nul_json,
    write_rows,
)
from projections.row import AuditRow, RowFold
from projections.values import Position
from projections.writer import event_model
from statemachine.events import AuditEvent
from statemachine.idempotency import Judged, Key, conflict_reason, judge

__all__ = ["apply_batch"]

_OFFSETS = (
    "INSERT INTO projector_offsets (consumer, topic, partition, next_offset) "
    "SELECT $1, * FROM unnest($2::text[], $3::integer[], $4::bigint[]) "
    "ON CONFLICT (consumer, topic, partition) DO UPDATE SET next_offset = excluded.next_offset"
)
# Asked in the batch's transaction once it holds a lock on audit_events that an ALTER of the
# column waits for: the body's type cannot change until the batch commits.
_LOCK_HISTORY = "LOCK TABLE audit_events IN ROW EXCLUSIVE MODE"
_BODY_IS_JSONB = (
    "SELECT atttypid = 'jsonb'::regtype FROM pg_attribute "
    "WHERE attrelid = 'audit_events'::regclass AND attname = 'body'"
)
_NUL = b"\\u0000"
# A body is searched for a backslash first: a one-byte search (an int: memchr) costs a tenth of
# the six-byte one (0.05 against 0.76 µs for the bench's bodies), and most bodies have none.
_BACKSLASH = ord("\\")


async def apply_batch(
    conn: asyncpg.Connection,
    schema: str,
    events: Sequence[tuple[AuditEvent, Position]],
    offsets: Mapping[tuple[str, int], int],
    consumer: str,
    bodies: Sequence[bytes | None] | None,
    now: datetime,
) -> tuple[int, int, list[tuple[int, str]]]:
    """``(applied, lost, conflicts)``: how many events were new, how many audits another
    writer changed concurrently (not written: the caller must not commit when it is not 0),
    and the events refused as conflicts (index, reason).

    An event recorded before is rarely in a batch (the consumer reads on from the offsets
    stored with the history), so the history is copied without looking its keys up first:
    the unique ``(event_id, audit_id)`` refuses a batch holding one (the log held it twice,
    or another writer applied it meanwhile), and only then are the recorded events read
    (to tell duplicates from conflicts) and the batch copied again without them, folded
    onto the rows read again (a savepoint keeps the rest of the transaction)."""
    rows = await load_rows(conn, {e.audit_id for e, _ in events}) if events else {}
    judged = _judge(events, bodies, {})
    history = _History(conn, schema, events, bodies, rows, now)
    if judged.fresh:
        await conn.execute(_LOCK_HISTORY)
        history.jsonb = bool(await conn.fetchval(_BODY_IS_JSONB))
        try:
            async with conn.transaction():  # a savepoint
                await history.copy(judged.fresh)
        except asyncpg.UniqueViolationError:
            # Another writer committed some of these events since the rows were loaded: its
            # rows are read again (after the events, so they hold all of them), else an
            # event folded onto an audit it had just inserted would be folded onto nothing.
            judged = _judge(events, bodies, await recorded(conn, [e for e, _ in events]))
            rows = await load_rows(conn, {e.audit_id for e, _ in events})
            history.rows = rows
            await history.copy(judged.fresh)
    fresh = judged.fresh
    conflicts = [
        (i, conflict_reason(event_model(*_at(events, bodies, i)), first))
        for i, first in judged.conflicts
    ]
    changed = history.folding.changed()
    folded_from = {audit_id: row.version for audit_id, row in rows.items()}
    lost = await write_rows(conn, changed, folded_from, now, history.nul) if changed else 0
    if offsets and not lost:
        keys = list(offsets)
        await conn.execute(
            _OFFSETS,
            consumer,
            [t for t, _ in keys],
            [p for _, p in keys],
            [offsets[k] for k in keys],
        )
    return len(fresh), lost, conflicts


def _at(
    events: Sequence[tuple[AuditEvent, Position]], bodies: Sequence[bytes | None] | None, i: int
) -> tuple[AuditEvent, bytes | None]:
    return events[i][0], bodies[i] if bodies is not None else None


def _judge(
    events: Sequence[tuple[AuditEvent, Position]],
    bodies: Sequence[bytes | None] | None,
    recorded: dict[Key, AuditEvent],
) -> Judged:
    return judge((e for e, _ in events), recorded, lambda i: event_model(*_at(events, bodies, i)))


class _History:
    """The batch's history, copied while its events are folded into their rows."""

    def __init__(
        self,
        conn: asyncpg.Connection,
        schema: str,
        events: Sequence[tuple[AuditEvent, Position]],
        bodies: Sequence[bytes | None] | None,
        rows: Mapping[str, AuditRow],
        now: datetime,
    ) -> None:
        self.conn, self.schema, self.events, self.bodies = conn, schema, events, bodies
        self.rows, self.now = rows, now
        self.jsonb = False
        self.folding = RowFold(rows)
        self.nul = False  # a body held a NUL (then rows may too)

    async def copy(self, fresh: list[int]) -> None:
        """Copy the history of the events at ``fresh`` (folding them afresh)."""
        self.folding, self.nul = RowFold(self.rows), False
        encoder = HistoryEncoder(self.now, jsonb=self.jsonb)
        await self.conn.copy_to_table(
            "audit_events",
            source=self._chunks(encoder, fresh),
            columns=COLUMNS,
            schema_name=self.schema,
            format="binary",
        )

    async def _chunks(self, encoder: HistoryEncoder, fresh: list[int]) -> AsyncIterator[bytes]:
        events, bodies = self.events, self.bodies
        add, fold = encoder.add, self.folding.add
        for i in fresh:
            event, position = events[i]
            fold(event)
            body = bodies[i] if bodies is not None else None
            if body is None:
                body = event.model_dump_json().encode()
            if _BACKSLASH in body and _NUL in body:  # jsonb, text refuse NUL: rare, slow path
                self.nul = True
                body = json.dumps(replace_nul_json(json.loads(body)), ensure_ascii=False).encode()
            add(event, position, body)
            if encoder.full():
                yield encoder.take()
        yield encoder.take(last=True)
