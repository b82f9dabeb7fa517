"""Audit rows in PostgreSQL: reading, decoding and encoding them, writing a batch of them
through a staging table with optimistic concurrency, and replacing the NUL characters that
PostgreSQL text and jsonb cannot hold (with U+FFFD).
"""

from __future__ import annotations

import json
import operator
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import asyncpg

from projections.postgres.schema import ROW_COLUMNS, ROW_TYPES
from projections.row import STATE_FIELDS, AuditRow
from statemachine.events import EVENT_ADAPTER, AuditEvent
from statemachine.idempotency import Key
from statemachine.state import AuditState
from statemachine.upcasting import upcast

__all__ = [
    "SELECT_ROWS",
    "UPDATE_FROM_STAGE",
    "decode_row",
    "event_uuids",
    "init_connection",
    "load_rows",
    "recorded",
    "replace_nul",
    "replace_nul_json",
    "write_rows",
]

_TEXT = tuple(i for i, c in enumerate(ROW_COLUMNS) if ROW_TYPES[c] == "text")
_N_STATE = len(STATE_FIELDS)

SELECT_ROWS = f"SELECT {', '.join(ROW_COLUMNS)} FROM audits"
_LOAD_ROWS = f"{SELECT_ROWS} WHERE audit_id = ANY($1::text[])"
# Rows are written through a per-connection temporary table: binary COPY in, then one
# UPDATE and one INSERT from it. (COPY encodes values cheaply; array parameters for
# `unnest` cost the client ~3x more per value in asyncpg.)
_STAGE = "auditrec_stage"
# Every column but updated_at, the batch's one time: a parameter of the UPDATE and INSERT.
_STAGED = tuple(c for c in ROW_COLUMNS if c != "updated_at")
_STAGE_COLUMNS = (*_STAGED, "expected")
_CREATE_STAGE = (
    f"CREATE TEMP TABLE IF NOT EXISTS {_STAGE} ("
    + ", ".join(f"{c} {ROW_TYPES[c]}" for c in _STAGED).replace(
        "audit_id text", 'audit_id text COLLATE "C"'
    )
    + ", expected bigint) ON COMMIT DELETE ROWS"
)
# Optimistic concurrency: a row is written only if it still has the version it was folded
# from (`expected`); `version` counts the audit's events, so it grows with every write.
# The audit ids to update are a parameter too: the staging table has no statistics, and
# joined by itself the planner may hash the whole of `audits` (a scan of every row, 30 ms
# at 40,000 audits to update a dozen); `= ANY` reaches them through the primary key.
UPDATE_FROM_STAGE = (
    "UPDATE audits AS a SET "
    + ", ".join(f"{c} = s.{c}" for c in _STAGED if c != "audit_id")
    + f", updated_at = $1::timestamptz FROM pg_temp.{_STAGE} AS s"
    " WHERE a.audit_id = ANY($2::text[]) AND s.expected IS NOT NULL"
    " AND a.audit_id = s.audit_id AND a.version = s.expected"
)
# New audits: another writer inserting one meanwhile makes the primary key refuse the INSERT
# (the transaction is then lost as a whole). ``ON CONFLICT DO NOTHING`` would count the rows
# instead, but its speculative insertion costs the server about half as much again per row.
_INSERT_FROM_STAGE = (
    f"INSERT INTO audits ({', '.join(_STAGED)}, updated_at) "
    f"SELECT {', '.join(_STAGED)}, $1::timestamptz FROM pg_temp.{_STAGE} WHERE expected IS NULL"
)


def replace_nul(value: str) -> str:
    return value.replace("\x00", "\ufffd")


def replace_nul_json(value: Any) -> Any:
    if isinstance(value, str):
        return replace_nul(value)
    if isinstance(value, dict):
        return {replace_nul(k): replace_nul_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [replace_nul_json(v) for v in value]
    return value


_state_values = operator.attrgetter(*STATE_FIELDS)


def _encode_row(row: AuditRow, expected: int | None) -> tuple[Any, ...]:
    return (*_state_values(row.state), row.version, row.last_event_id, expected)


def _without_nul(values: tuple[Any, ...]) -> tuple[Any, ...]:
    out = list(values)
    for i in _TEXT:
        if out[i] is not None and "\x00" in out[i]:
            out[i] = replace_nul(out[i])
    return tuple(out)


async def init_connection(conn: asyncpg.Connection) -> None:
    await conn.execute(_CREATE_STAGE)


def decode_row(rec: Sequence[Any]) -> AuditRow:
    last = rec[_N_STATE + 1]
    return AuditRow(
        state=AuditState(*rec[:_N_STATE]),
        version=rec[_N_STATE],
        last_event_id=uuid.UUID(bytes=last.bytes) if last is not None else None,
        updated_at=rec[_N_STATE + 2],
    )


async def load_rows(conn: asyncpg.Connection, audit_ids: Iterable[str]) -> dict[str, AuditRow]:
    """The stored rows of these audits, by audit id."""
    rows: dict[str, AuditRow] = {}
    for rec in await conn.fetch(_LOAD_ROWS, list(audit_ids)):
        row = decode_row(rec)
        rows[row.audit_id] = row
    return rows


async def recorded(
    conn: asyncpg.Connection | asyncpg.Pool, events: Sequence[AuditEvent]
) -> dict[Key, AuditEvent]:
    """The events of the history that share a key ``(audit_id, event_id)`` with ``events``,
    by key (decoded from the history's bodies, to compare content)."""
    keys = {(e.audit_id, e.event_id.int) for e in events}
    ids = list({e.event_id.int: e.event_id for e in events}.values())
    recs = await conn.fetch(
        "SELECT audit_id, event_id, body::text FROM audit_events WHERE event_id = ANY($1::uuid[])",
        ids,
    )
    found: dict[Key, AuditEvent] = {}
    for audit_id, event_id, body in recs:
        key = (audit_id, event_id.int)
        if key in keys:
            found[key] = EVENT_ADAPTER.validate_python(upcast(json.loads(body)))
    return found


async def write_rows(
    conn: asyncpg.Connection,
    changed: Mapping[str, AuditRow],
    folded_from: Mapping[str, int],
    now: datetime,
    nul: bool,
) -> int:
    """Write each changed row once; return how many another writer changed concurrently
    (and so were not written: the caller's transaction must not commit, and after a new
    audit's insert was refused it can run no other statement)."""
    # Rows come from stored rows (never NUL) and this batch's events: only a NUL in an
    # event can put one in a row.
    staged = [
        _encode_row(changed[audit_id], folded_from.get(audit_id)) for audit_id in sorted(changed)
    ]
    if nul:
        staged = [_without_nul(values) for values in staged]
    await conn.copy_records_to_table(
        _STAGE, records=staged, columns=_STAGE_COLUMNS, schema_name="pg_temp"
    )
    updates = [audit_id for audit_id in changed if audit_id in folded_from]
    written = 0
    if updates:
        status = await conn.execute(UPDATE_FROM_STAGE, now, updates)
        written += int(status.rsplit(" ", 1)[-1])
    if len(updates) < len(staged):
        try:
            status = await conn.execute(_INSERT_FROM_STAGE, now)
        except asyncpg.UniqueViolationError:
            return len(staged) - len(updates)  # inserted meanwhile: none of them written
        written += int(status.rsplit(" ", 1)[-1])
    return len(staged) - written


def event_uuids(values: Iterable[Any]) -> list[uuid.UUID]:
    """The values that are UUIDs, as UUIDs; the others are dropped (they match nothing)."""
    out = []
    for value in values:
        if isinstance(value, uuid.UUID):
            out.append(value)
            continue
        try:
            out.append(uuid.UUID(str(value)))
        except ValueError:
            continue  # not an event id: matches nothing
    return out
