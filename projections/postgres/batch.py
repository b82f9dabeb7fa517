"""One batch of events applied to PostgreSQL inside the caller's transaction, in a handful
of statements whatever its size: load the affected rows and the already-recorded event ids
(``= ANY``); stream the history with binary ``COPY`` (encoded by ``history_copy.py``) while
folding, so folding overlaps the server's work; write each changed audit once (``COPY`` into a
temporary table, then one ``UPDATE`` guarded by the version each row was folded from and one
``INSERT ... ON CONFLICT DO NOTHING`` for new audits); upsert the consumer's offsets.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime

import asyncpg

from projections.postgres.history_copy import COLUMNS, HistoryEncoder
from projections.postgres.rows import load_rows, replace_nul_json, write_rows
from projections.row import RowFold
from projections.store import Position
from statemachine.events import AuditEvent

__all__ = ["apply_batch"]

_OFFSETS = (
    "INSERT INTO projector_offsets (consumer, topic, partition, next_offset) "
    "SELECT $1, * FROM unnest($2::text[], $3::integer[], $4::bigint[]) "
    "ON CONFLICT (consumer, topic, partition) DO UPDATE SET next_offset = excluded.next_offset"
)
# Asked in the batch's transaction after load_rows read audit_events (so holding a lock that
# an ALTER of its column waits for): the body's type cannot change until the batch commits.
_BODY_IS_JSONB = (
    "SELECT atttypid = 'jsonb'::regtype FROM pg_attribute "
    "WHERE attrelid = 'audit_events'::regclass AND attname = 'body'"
)
_NUL = b"\\u0000"


async def apply_batch(
    conn: asyncpg.Connection,
    schema: str,
    events: Sequence[tuple[AuditEvent, Position]],
    offsets: Mapping[tuple[str, int], int],
    consumer: str,
    bodies: Sequence[bytes | None] | None,
    now: datetime,
) -> tuple[int, int]:
    """``(applied, lost)``: how many events were new, and how many audits another writer
    changed concurrently (not written: the caller must not commit when it is not 0)."""
    rows, fresh = await load_rows(conn, events)  # indexes into events
    folding = RowFold(rows)
    nul = False

    async def history(encoder: HistoryEncoder) -> AsyncIterator[bytes]:
        nonlocal nul
        add, fold = encoder.add, folding.add
        for i in fresh:
            event, position = events[i]
            fold(event)
            body = bodies[i] if bodies is not None else None
            if body is None:
                body = event.model_dump_json().encode()
            if _NUL in body:  # jsonb and text refuse NUL: rare, slow path
                nul = True
                body = json.dumps(replace_nul_json(json.loads(body)), ensure_ascii=False).encode()
            add(event, position, body)
            if encoder.full():
                yield encoder.take()
        yield encoder.take(last=True)

    if fresh:
        encoder = HistoryEncoder(now, jsonb=await conn.fetchval(_BODY_IS_JSONB))
        await conn.copy_to_table(
            "audit_events",
            source=history(encoder),
            columns=COLUMNS,
            schema_name=schema,
            format="binary",
        )
    changed = folding.changed()
    folded_from = {audit_id: row.version for audit_id, row in rows.items()}
    lost = await write_rows(conn, changed, folded_from, now, nul) if changed else 0
    if offsets and not lost:
        keys = list(offsets)
        await conn.execute(
            _OFFSETS,
            consumer,
            [t for t, _ in keys],
            [p for _, p in keys],
            [offsets[k] for k in keys],
        )
    return len(fresh), lost
