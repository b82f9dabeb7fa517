"""Reading the histories of many audits at once from ``audit_events`` (a backtest reads every
observed audit's): a few hundred audits a query instead of a query (and a thread hop) each."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from projections.sqlite.rows import chunks, from_micros
from projections.values import HistoryEntry
from statemachine.events import EVENT_ADAPTER

__all__ = ["read_histories"]


def read_histories(
    conn: sqlite3.Connection, audit_ids: Sequence[str]
) -> dict[str, list[HistoryEntry]]:
    out: dict[str, list[HistoryEntry]] = {audit_id: [] for audit_id in audit_ids}
    for chunk in chunks(list(out)):
        marks = ", ".join("?" for _ in chunk)
        cur = conn.execute(
            'SELECT audit_id, body, topic, partition, "offset", recorded_at FROM audit_events '
            f"WHERE audit_id IN ({marks}) ORDER BY audit_id, seq",
            chunk,
        )
        for audit_id, body, t, p, o, rec in cur:
            position = (t, p, o) if t is not None else None
            out[audit_id].append(
                HistoryEntry(EVENT_ADAPTER.validate_json(body), position, from_micros(rec))
            )
    return out
