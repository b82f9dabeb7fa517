"""The embedded event log's tables: topics, their records, consumer groups' committed offsets
and leases."""

from __future__ import annotations

__all__ = ["SCHEMA"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS topics (name TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS records (
    topic TEXT NOT NULL, "offset" INTEGER NOT NULL, key TEXT, value BLOB NOT NULL,
    headers TEXT NOT NULL, ts INTEGER NOT NULL, PRIMARY KEY (topic, "offset")
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS group_offsets (
    group_id TEXT NOT NULL, topic TEXT NOT NULL, next_offset INTEGER NOT NULL,
    PRIMARY KEY (group_id, topic)
);
CREATE TABLE IF NOT EXISTS leases (
    group_id TEXT NOT NULL, topic TEXT NOT NULL, owner TEXT NOT NULL, expires_at REAL NOT NULL,
    PRIMARY KEY (group_id, topic)
);
"""
