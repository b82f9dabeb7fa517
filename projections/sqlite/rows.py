"""Audit rows in SQLite: timestamps as epoch microseconds, encoding and decoding rows, the
row select and upsert statements, and chunking ``IN (...)`` lists under SQLite's limit on
bound parameters.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from projections.row import COLUMN_KINDS, STORED_COLUMNS, TIMESTAMPS, AuditRow
from statemachine.events import EVENT_ADAPTER, AuditEvent
from statemachine.idempotency import Key
from statemachine.upcasting import upcast

__all__ = [
    "ROW_COLUMNS",
    "SELECT_ROWS",
    "UPSERT_ROW",
    "chunks",
    "decode_row",
    "encode_row",
    "from_micros",
    "recorded",
    "to_micros",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ROW_COLUMNS: tuple[str, ...] = STORED_COLUMNS

_PLACEHOLDERS = ", ".join("?" for _ in ROW_COLUMNS)
UPSERT_ROW = (
    f"INSERT INTO audits ({', '.join(ROW_COLUMNS)}) VALUES ({_PLACEHOLDERS}) "
    "ON CONFLICT (audit_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in ROW_COLUMNS if c != "audit_id")
)
SELECT_ROWS = f"SELECT {', '.join(ROW_COLUMNS)} FROM audits"


def to_micros(value: datetime | None) -> int | None:
    if value is None:
        return None
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(value: int | None) -> datetime | None:
    if value is None:
        return None
    return _EPOCH + timedelta(microseconds=value)


_BOOLEANS = tuple(c for c, kind in COLUMN_KINDS.items() if kind == "boolean")


def encode_row(row: AuditRow, now: int) -> tuple[Any, ...]:
    values = row.values()
    values["updated_at"] = now
    out: list[Any] = []
    for name, kind in COLUMN_KINDS.items():
        value = values[name]
        if kind == "timestamp" and name != "updated_at":
            value = to_micros(value)
        elif kind == "uuid":
            value = str(value) if value else None
        elif kind == "boolean":
            value = int(bool(value))
        out.append(value)
    return tuple(out)


def decode_row(values: Sequence[Any]) -> AuditRow:
    data = dict(zip(ROW_COLUMNS, values, strict=True))
    for name in TIMESTAMPS:
        data[name] = from_micros(data[name])
    for name in _BOOLEANS:
        data[name] = bool(data[name])
    return AuditRow.from_values(data)


def chunks(items: Sequence[Any], size: int = 500) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def recorded(conn: sqlite3.Connection, events: Sequence[AuditEvent]) -> dict[Key, AuditEvent]:
    """The recorded events that share a key ``(audit_id, event_id)`` with ``events``, by key
    (decoded from the history's bodies, to compare content)."""
    keys = {(e.audit_id, e.event_id.int) for e in events}
    ids = list(dict.fromkeys(str(e.event_id) for e in events))
    found: dict[Key, AuditEvent] = {}
    for chunk in chunks(ids):
        marks = ", ".join("?" for _ in chunk)
        for audit_id, event_id, body in conn.execute(
            f"SELECT audit_id, event_id, body FROM audit_events WHERE event_id IN ({marks})",
            chunk,
        ):
            key = (audit_id, uuid.UUID(event_id).int)
            if key in keys:
                found[key] = EVENT_ADAPTER.validate_python(upcast(json.loads(body)))
    return found
