"""One batch of events applied to PostgreSQL inside the caller's transaction, in a handful
of statements whatever its size: load the affected rows and the already-recorded event ids
(``= ANY``); stream the history with binary ``COPY`` while folding, so folding overlaps the
server's work; write each changed audit once (``COPY`` into a temporary table, then one
``UPDATE`` guarded by the version each row was folded from and one ``INSERT ... ON CONFLICT
DO NOTHING`` for new audits); upsert the consumer's offsets.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import asyncpg

from projections.postgres.rows import load_rows, replace_nul_json, write_rows
from projections.row import AuditRow, project
from projections.store import Position
from statemachine.events import AuditEvent

__all__ = ["apply_batch"]

_HISTORY_COLUMNS = (
    "event_id",
    "audit_id",
    "type",
    "occurred_at",
    "causation_id",
    "topic",
    "partition",
    "offset",
    "body",
    "recorded_at",
)
_OFFSETS = (
    "INSERT INTO projector_offsets (consumer, topic, partition, next_offset) "
    "SELECT $1, * FROM unnest($2::text[], $3::integer[], $4::bigint[]) "
    "ON CONFLICT (consumer, topic, partition) DO UPDATE SET next_offset = excluded.next_offset"
)


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
    folded_from = {audit_id: row.version for audit_id, row in rows.items()}
    changed: dict[str, AuditRow] = {}
    nul = False

    def fold() -> Iterator[tuple[Any, ...]]:
        nonlocal nul
        for i in fresh:
            event, (topic, partition, offset) = events[i]
            row = project(rows.get(event.audit_id), event)
            rows[event.audit_id] = row
            if row.state.exists:
                changed[event.audit_id] = row
            verbatim = bodies[i] if bodies is not None else None
            body = verbatim.decode() if verbatim is not None else event.model_dump_json()
            if "\\u0000" in body:  # jsonb and text refuse NUL: rare, slow path
                nul = True
                body = json.dumps(replace_nul_json(json.loads(body)), ensure_ascii=False)
            yield (
                event.event_id,
                event.audit_id,
                event.type,
                event.occurred_at,
                event.causation_id,
                topic,
                partition,
                offset,
                body,
                now,
            )

    if fresh:
        await conn.copy_records_to_table(
            "audit_events", records=fold(), columns=_HISTORY_COLUMNS, schema_name=schema
        )
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
