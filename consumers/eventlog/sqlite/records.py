"""The embedded log's records: appending them (offsets assigned inside the caller's write
transaction), reading a range back, a topic's end offset, and the signal that wakes this
process's pollers when it appends (appends by other processes are found by polling).

Headers are stored as JSON pairs of name and base64 value; ``ts`` is epoch milliseconds.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from consumers.eventlog.dead_letters import settle
from consumers.eventlog.letters import is_dead_letter
from consumers.eventlog.port import OutRecord, Record

__all__ = [
    "AppendSignal",
    "append_records",
    "delete_before",
    "end_offset",
    "fetch_records",
    "offset_at",
    "start_offset",
]


def end_offset(conn: sqlite3.Connection, topic: str) -> int:
    """The offset the next record of ``topic`` gets."""
    row = conn.execute('SELECT MAX("offset") FROM records WHERE topic = ?', (topic,)).fetchone()
    return 0 if row[0] is None else int(row[0]) + 1


def start_offset(conn: sqlite3.Connection, topic: str) -> int:
    """The first offset still held (the end offset of an empty topic)."""
    row = conn.execute('SELECT MIN("offset") FROM records WHERE topic = ?', (topic,)).fetchone()
    return end_offset(conn, topic) if row[0] is None else int(row[0])


def offset_at(conn: sqlite3.Connection, topic: str, at_ms: int) -> int:
    """The offset of the first record written at or after ``at_ms``; the end offset if none."""
    row = conn.execute(
        'SELECT MIN("offset") FROM records WHERE topic = ? AND ts >= ?', (topic, at_ms)
    ).fetchone()
    return end_offset(conn, topic) if row[0] is None else int(row[0])


def delete_before(conn: sqlite3.Connection, topic: str, offset: int) -> None:
    """Inside the caller's write transaction; keeps the last record (offsets come from it)."""
    keep = end_offset(conn, topic) - 1
    conn.execute('DELETE FROM records WHERE topic = ? AND "offset" < ?', (topic, min(offset, keep)))


def _under_keys(
    conn: sqlite3.Connection, records: Sequence[OutRecord]
) -> dict[tuple[str, str], list[Record | OutRecord]]:
    """What each topic holds under the keys of ``records``, by (topic, key)."""
    wanted: dict[str, set[str]] = {}
    for rec in records:
        wanted.setdefault(rec.topic, set()).add(rec.key)
    found: dict[tuple[str, str], list[Record | OutRecord]] = {}
    for topic, keys in wanted.items():
        listed = sorted(keys)
        for i in range(0, len(listed), 500):
            chunk = listed[i : i + 500]
            rows = conn.execute(
                'SELECT "offset", key, value, headers, ts FROM records WHERE topic = ? AND key '
                f'IN ({", ".join("?" * len(chunk))}) ORDER BY "offset"',
                (topic, *chunk),
            )
            for row in rows:
                found.setdefault((topic, row[1]), []).append(_record(topic, *row))
    return found


def _record(topic: str, offset: int, key: str, value: bytes, headers: str, ts: int) -> Record:
    hdrs = tuple((k, base64.b64decode(v)) for k, v in json.loads(headers))
    return Record(topic, 0, offset, key, bytes(value), hdrs, ts)


def append_records(conn: sqlite3.Connection, records: Sequence[OutRecord]) -> int:
    """Inside the caller's write transaction, which makes the offsets it assigns safe, and
    makes setting a dead letter aside (:func:`~consumers.eventlog.dead_letters.settle` against
    what the topic holds under its key) one step with every other writer of the file. Returns
    the records appended."""
    next_offsets: dict[str, int] = {}
    now = int(time.time() * 1000)
    rows = []
    letters = [r for r in records if is_dead_letter(r)]
    held = _under_keys(conn, letters) if letters else {}
    for given in records:
        if is_dead_letter(given):
            under_key = held.setdefault((given.topic, given.key), [])
            settled = settle(under_key, given)
            if settled is None:
                continue
            rec = settled
            under_key.append(rec)
        else:
            rec = given
        if rec.topic not in next_offsets:
            next_offsets[rec.topic] = end_offset(conn, rec.topic)
        offset = next_offsets[rec.topic]
        next_offsets[rec.topic] = offset + 1
        headers = json.dumps([[k, base64.b64encode(v).decode()] for k, v in rec.headers])
        rows.append((rec.topic, offset, rec.key, rec.value, headers, now))
    conn.executemany("INSERT INTO records VALUES (?, ?, ?, ?, ?, ?)", rows)
    return len(rows)


def fetch_records(
    conn: sqlite3.Connection, topic: str, start: int, end: int | None, limit: int
) -> list[Record]:
    sql = 'SELECT "offset", key, value, headers, ts FROM records WHERE topic = ? AND "offset" >= ?'
    args: list[Any] = [topic, start]
    if end is not None:
        sql += ' AND "offset" < ?'
        args.append(end)
    sql += ' ORDER BY "offset" LIMIT ?'
    args.append(limit)
    return [_record(topic, *row) for row in conn.execute(sql, args)]


class AppendSignal:
    def __init__(self) -> None:
        self._event = asyncio.Event()

    def set(self) -> None:
        self._event.set()

    async def wait(self, timeout: float) -> None:
        """Wake early when this process appends; otherwise after ``timeout``."""
        self._event.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout)
