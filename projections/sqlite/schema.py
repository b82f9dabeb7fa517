"""The projection's SQLite schema: column types and the DDL ``SQLiteDB.start`` runs.

SQLite has no timestamp type: timestamps are INTEGER microseconds since the Unix epoch (UTC),
booleans 0/1, uuids text. The schema has one version, recorded in ``schema_version``.
"""

from __future__ import annotations

from projections.row import COLUMN_KINDS, ColumnKind

__all__ = ["SCHEMA", "SCHEMA_VERSION"]

SCHEMA_VERSION = 1
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
CREATE TABLE IF NOT EXISTS audit_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL UNIQUE, audit_id TEXT NOT NULL, type TEXT NOT NULL,
    occurred_at INTEGER NOT NULL, causation_id TEXT,
    topic TEXT, partition INTEGER, "offset" INTEGER,
    body TEXT NOT NULL, recorded_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_events_audit ON audit_events (audit_id, seq);
CREATE INDEX IF NOT EXISTS audit_events_causation ON audit_events (causation_id)
    WHERE causation_id IS NOT NULL;
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
CREATE TABLE IF NOT EXISTS api_requests (account TEXT NOT NULL, sent_at INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS api_requests_window ON api_requests (account, sent_at);
CREATE TABLE IF NOT EXISTS api_pauses (account TEXT PRIMARY KEY, until INTEGER NOT NULL)
"""
SCHEMA = _SCHEMA_TEMPLATE.replace("{audits}", _AUDITS)
