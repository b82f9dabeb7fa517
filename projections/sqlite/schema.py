"""The projection's SQLite schema: column types and the DDL ``SQLiteDB.start`` runs.

SQLite has no timestamp type: timestamps are INTEGER microseconds since the Unix epoch (UTC),
booleans 0/1, uuids text. The version is recorded in ``schema_version``; :func:`upgrade` brings
a file of an older version up (columns the row gained are added to ``audits``; a history keyed
by ``event_id`` alone is copied into one keyed by ``(event_id, audit_id)``). Tables a version
adds (the outcome feed's, version 6; the orphans', version 10) and indexes on the first
columns (the list's search, version 8) are made by :data:`SCHEMA` itself, which creates what
is missing at every start.
"""

from __future__ import annotations

import sqlite3

from projections.row import COLUMN_KINDS, ColumnKind

__all__ = ["SCHEMA", "SCHEMA_VERSION", "upgrade"]

SCHEMA_VERSION = 10
_TYPE_OF_KIND: dict[ColumnKind, str] = {
    "text": "TEXT",
    "integer": "INTEGER",
    "timestamp": "INTEGER",
    "boolean": "INTEGER",
    "uuid": "TEXT",
}
_CONSTRAINTS = {
    "audit_id": " PRIMARY KEY",
    "status": " NOT NULL",
    "overturned": " NOT NULL DEFAULT 0",
    "version": " NOT NULL",
}
_AUDITS = ",\n    ".join(
    f"{c} {_TYPE_OF_KIND[kind]}{_CONSTRAINTS.get(c, '')}" for c, kind in COLUMN_KINDS.items()
)

_SCHEMA_TEMPLATE = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS audits (
    {audits}
);
CREATE INDEX IF NOT EXISTS audits_watchdog ON audits
    (last_observed_at, started_at) WHERE status = 'running';
CREATE INDEX IF NOT EXISTS audits_listing ON audits (status, started_at, audit_id);
CREATE INDEX IF NOT EXISTS audits_started ON audits (started_at, audit_id);
CREATE INDEX IF NOT EXISTS audits_instance ON audits (workflow_instance_id)
    WHERE workflow_instance_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS audits_project ON audits (project_id) WHERE project_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS audits_url ON audits (start_url) WHERE start_url IS NOT NULL;
CREATE INDEX IF NOT EXISTS audits_workflow ON audits (workflow) WHERE workflow IS NOT NULL;
CREATE INDEX IF NOT EXISTS audits_stalled ON audits (stalled_at) WHERE stalled_at IS NOT NULL;
{history}
CREATE TABLE IF NOT EXISTS projector_offsets (
    consumer TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL,
    next_offset INTEGER NOT NULL, PRIMARY KEY (consumer, topic, partition)
);
CREATE TABLE IF NOT EXISTS processes (
    process TEXT NOT NULL, component TEXT NOT NULL, last_seen INTEGER NOT NULL,
    PRIMARY KEY (process, component)
);
CREATE TABLE IF NOT EXISTS telemetry_sent (event_id TEXT PRIMARY KEY, sent_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS locks (
    name TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS ticks (
    name TEXT NOT NULL, slot INTEGER NOT NULL, owner TEXT NOT NULL, claimed_at INTEGER NOT NULL,
    PRIMARY KEY (name, slot)
);
CREATE TABLE IF NOT EXISTS api_requests (
    account TEXT NOT NULL, sent_at INTEGER NOT NULL, spender TEXT NOT NULL DEFAULT 'other'
);
CREATE INDEX IF NOT EXISTS api_requests_window ON api_requests (account, sent_at);
CREATE TABLE IF NOT EXISTS api_pauses (account TEXT PRIMARY KEY, until INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS sweeps (
    sweep_id TEXT PRIMARY KEY, requests TEXT NOT NULL, at INTEGER NOT NULL,
    deadline INTEGER NOT NULL, claimed_by TEXT, claimed_until INTEGER, verdict TEXT,
    lost INTEGER, observations INTEGER, judged_at INTEGER
);
CREATE INDEX IF NOT EXISTS sweeps_open ON sweeps (at) WHERE verdict IS NULL;
CREATE TABLE IF NOT EXISTS checkpoints (
    consumer TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL,
    next_offset INTEGER NOT NULL, state BLOB NOT NULL, saved_at INTEGER NOT NULL,
    PRIMARY KEY (consumer, topic, partition)
);
CREATE TABLE IF NOT EXISTS brake (
    name TEXT PRIMARY KEY, engaged INTEGER NOT NULL, since INTEGER, sweep_id TEXT,
    lost INTEGER NOT NULL DEFAULT 0, observations INTEGER NOT NULL DEFAULT 0,
    ended_at INTEGER, ended_by TEXT, how TEXT
);
CREATE TABLE IF NOT EXISTS console_sessions (
    name TEXT PRIMARY KEY, generation INTEGER NOT NULL, ended_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS outcome_endpoints (
    endpoint TEXT PRIMARY KEY, target TEXT NOT NULL, registered_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS outcome_parked (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    endpoint TEXT NOT NULL, outcome_id TEXT NOT NULL, audit_id TEXT NOT NULL,
    partition INTEGER NOT NULL, body TEXT NOT NULL, attempts INTEGER NOT NULL,
    error TEXT NOT NULL, parked_at INTEGER NOT NULL,
    retry_requested_at INTEGER, retry_requested_by TEXT,
    UNIQUE (endpoint, outcome_id)
);
CREATE INDEX IF NOT EXISTS outcome_parked_partition ON outcome_parked (endpoint, partition, seq);
CREATE INDEX IF NOT EXISTS outcome_parked_audit ON outcome_parked (endpoint, audit_id, seq);
CREATE TABLE IF NOT EXISTS watched_workflows (workflow TEXT PRIMARY KEY, since INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS orphans (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    workflow TEXT NOT NULL, instance_id TEXT NOT NULL,
    created_on INTEGER NOT NULL, status TEXT NOT NULL,
    first_seen INTEGER NOT NULL, last_seen INTEGER NOT NULL,
    state TEXT NOT NULL,
    terminated_at INTEGER, terminated_by TEXT, on_behalf_of TEXT, result TEXT,
    UNIQUE (workflow, instance_id)
);
CREATE INDEX IF NOT EXISTS orphans_open ON orphans (workflow, seq) WHERE state = 'open';
CREATE TABLE IF NOT EXISTS orphan_history (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    workflow TEXT NOT NULL, instance_id TEXT NOT NULL, at INTEGER NOT NULL,
    kind TEXT NOT NULL, actor TEXT, on_behalf_of TEXT, detail TEXT
);
CREATE INDEX IF NOT EXISTS orphan_history_instance ON orphan_history (workflow, instance_id, seq)
"""
# The history is keyed by the idempotency key (statemachine/idempotency.py): an event id names
# one event of its audit. The key leads with event_id, so a look-up by id alone uses it.
_HISTORY_TABLE = """CREATE TABLE IF NOT EXISTS audit_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL, audit_id TEXT NOT NULL, type TEXT NOT NULL,
    occurred_at INTEGER NOT NULL, causation_id TEXT,
    topic TEXT, partition INTEGER, "offset" INTEGER,
    body TEXT NOT NULL, recorded_at INTEGER NOT NULL,
    UNIQUE (event_id, audit_id)
)"""
_HISTORY_INDEXES = """CREATE INDEX IF NOT EXISTS audit_events_audit ON audit_events (audit_id, seq);
CREATE INDEX IF NOT EXISTS audit_events_causation ON audit_events (causation_id)
    WHERE causation_id IS NOT NULL;"""
SCHEMA = _SCHEMA_TEMPLATE.replace("{audits}", _AUDITS).replace(
    "{history}", f"{_HISTORY_TABLE};\n{_HISTORY_INDEXES}"
)


def upgrade(conn: sqlite3.Connection) -> None:
    """Bring a file made by an older version up to :data:`SCHEMA_VERSION` (in the caller's
    transaction): add the ``audits`` columns it lacks (a failure's time moved from
    ``completed_at`` to a new ``failed_at``), then the indexes that use them, and the budget's
    ``spender`` column; rekey a history keyed by ``event_id`` alone."""
    present = {row[1] for row in conn.execute("PRAGMA table_info(audits)")}
    for column, kind in COLUMN_KINDS.items():
        if column not in present:
            conn.execute(f"ALTER TABLE audits ADD COLUMN {column} {_TYPE_OF_KIND[kind]}")
    if "failed_at" not in present:
        _failed_at(conn)
    if "spender" not in {row[1] for row in conn.execute("PRAGMA table_info(api_requests)")}:
        conn.execute("ALTER TABLE api_requests ADD COLUMN spender TEXT NOT NULL DEFAULT 'other'")
    conn.execute(
        "CREATE INDEX IF NOT EXISTS audits_held ON audits (held_at) "
        "WHERE held_decision_id IS NOT NULL"
    )
    conn.execute(
        "CREATE INDEX IF NOT EXISTS audits_instance ON audits (workflow_instance_id) "
        "WHERE workflow_instance_id IS NOT NULL"
    )
    conn.execute(
        "CREATE INDEX IF NOT EXISTS audits_workflow ON audits (workflow) WHERE workflow IS NOT NULL"
    )
    conn.execute(
        "CREATE INDEX IF NOT EXISTS audits_stalled ON audits (stalled_at) "
        "WHERE stalled_at IS NOT NULL"
    )
    _rekey_history(conn)
    conn.execute("UPDATE schema_version SET version = ? WHERE version < ?", (SCHEMA_VERSION,) * 2)


def _failed_at(conn: sqlite3.Connection) -> None:
    """A file from before ``failed_at`` (version 6 and before) kept a failure's time in
    ``completed_at``: it moves to ``failed_at``, and a failed audit has no ``completed_at``."""
    conn.execute(
        "UPDATE audits SET failed_at = completed_at, completed_at = NULL WHERE status = 'failed'"
    )


def _rekey_history(conn: sqlite3.Connection) -> None:
    """A history keyed by ``event_id`` alone (version 3 and before) copied, row for row and
    ``seq`` kept, into one keyed by ``(event_id, audit_id)`` (SQLite cannot change a table's
    constraints in place); nothing when it already is."""
    sql = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'audit_events'"
    ).fetchone()
    if sql is None or "UNIQUE (event_id, audit_id)" in sql[0]:
        return
    columns = (
        'seq, event_id, audit_id, type, occurred_at, causation_id, topic, partition, "offset", '
        "body, recorded_at"
    )
    conn.execute("ALTER TABLE audit_events RENAME TO audit_events_old")
    conn.execute(_HISTORY_TABLE)
    conn.execute(
        f"INSERT INTO audit_events ({columns}) SELECT {columns} FROM audit_events_old ORDER BY seq"
    )
    conn.execute("DROP TABLE audit_events_old")  # and its indexes, made again:
    for statement in _HISTORY_INDEXES.split(";"):
        if statement.strip():
            conn.execute(statement)
