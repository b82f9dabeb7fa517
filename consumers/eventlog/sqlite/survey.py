"""Which topics the embedded log's file holds, read without creating the file or its tables
(``auditrec doctor``)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3

from projections.sqlite.connection import open_read_only, sqlite_file
from statemachine.errors import EventLogError

__all__ = ["list_topics"]


async def list_topics(url: str) -> set[str] | None:
    """The topics in the file; ``None`` when there is no file; an empty set when it has no
    ``topics`` table yet. An unreadable file raises :class:`EventLogError`."""
    path = sqlite_file(url)

    def read() -> set[str] | None:
        conn = open_read_only(path)
        if conn is None:
            return None
        with contextlib.closing(conn):
            try:
                return {row[0] for row in conn.execute("SELECT name FROM topics")}
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return set()
                raise

    try:
        return await asyncio.to_thread(read)
    except sqlite3.Error as exc:
        raise EventLogError(f"SQLite event log {path}: {exc}", retriable=False) from exc
