"""The embedded projection's schema version, read from the file without creating it."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3

from projections.sqlite.connection import open_read_only, sqlite_file
from projections.sqlite.schema import SCHEMA_VERSION
from projections.values import SchemaState
from statemachine.errors import StoreError

__all__ = ["schema_state"]


async def schema_state(url: str) -> SchemaState:
    """The version in ``schema_version``; ``found=None`` when the file or the table is
    missing. An unreadable file raises :class:`StoreError`."""
    path = sqlite_file(url)

    def read() -> int | None:
        conn = open_read_only(path)
        if conn is None:
            return None
        with contextlib.closing(conn):
            try:
                row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return None
                raise
        return None if row is None or row[0] is None else int(row[0])

    try:
        found = await asyncio.to_thread(read)
    except sqlite3.Error as exc:
        raise StoreError(f"SQLite {path}: {exc}", retriable=False) from exc
    return SchemaState(found, SCHEMA_VERSION)
