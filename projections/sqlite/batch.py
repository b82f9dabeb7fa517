"""One batch of events applied to SQLite inside the caller's transaction: judge each event's
key ``(audit_id, event_id)`` against the history and the batch (:mod:`statemachine.idempotency`:
duplicates are skipped, conflicts refused), fold the fresh ones into their rows, append them to
the history, upsert each changed row once and the consumer's offsets.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence

from projections.row import AuditRow, RowFold
from projections.sqlite.rows import (
    SELECT_ROWS,
    UPSERT_ROW,
    chunks,
    decode_row,
    encode_row,
    recorded,
    to_micros,
)
from projections.values import ApplyResult, Position
from projections.writer import event_model
from statemachine.events import AuditEvent
from statemachine.idempotency import conflict_reason, judge

__all__ = ["apply_batch"]


def _load_rows(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, AuditRow]:
    rows: dict[str, AuditRow] = {}
    for chunk in chunks(ids):
        marks = ", ".join("?" for _ in chunk)
        for values in conn.execute(f"{SELECT_ROWS} WHERE audit_id IN ({marks})", chunk):
            row = decode_row(values)
            rows[row.audit_id] = row
    return rows


def apply_batch(
    conn: sqlite3.Connection,
    events: Sequence[tuple[AuditEvent, Position]],
    offsets: Mapping[tuple[str, int], int],
    consumer: str,
    bodies: Sequence[bytes | None] | None,
    now: int,
) -> ApplyResult:
    """``now`` (epoch microseconds) stamps the history and the rows."""

    def model(i: int) -> AuditEvent:
        return event_model(events[i][0], bodies[i] if bodies is not None else None)

    judged = judge((e for e, _ in events), recorded(conn, [e for e, _ in events]), model)
    fresh = judged.fresh
    conflicts = tuple((i, conflict_reason(model(i), first)) for i, first in judged.conflicts)
    rows = _load_rows(conn, list({events[i][0].audit_id for i in fresh}))
    history = []
    folding = RowFold(rows)
    for i in fresh:
        event, (topic, partition, offset) = events[i]
        verbatim = bodies[i] if bodies is not None else None
        folding.add(event)
        history.append(
            (
                str(event.event_id),
                event.audit_id,
                event.type,
                to_micros(event.occurred_at),
                str(event.causation_id) if event.causation_id else None,
                topic,
                partition,
                offset,
                verbatim.decode() if verbatim is not None else event.model_dump_json(),
                now,
            )
        )
    conn.executemany(
        "INSERT INTO audit_events (event_id, audit_id, type, occurred_at, causation_id,"
        ' topic, partition, "offset", body, recorded_at)'
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        history,
    )
    conn.executemany(UPSERT_ROW, [encode_row(r, now) for r in folding.changed().values()])
    conn.executemany(
        "INSERT INTO projector_offsets VALUES (?, ?, ?, ?) "
        "ON CONFLICT (consumer, topic, partition) DO UPDATE SET "
        "next_offset = excluded.next_offset",
        [(consumer, t, p, n) for (t, p), n in offsets.items()],
    )
    return ApplyResult(len(fresh), len(events) - len(fresh) - len(conflicts), conflicts)
