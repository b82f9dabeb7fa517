"""A SQLite connection driven from asyncio: one worker thread owns it, calls queue on it; and
a second, read-only connection on a thread of its own for point reads (:meth:`SQLiteDB.read`),
so a status read never queues behind a write transaction (WAL lets it read what is committed).

Shared by the embedded projection store and the embedded event log (which uses the same SQLite
file discipline for its own file). The files are private (``0600`` in ``0700`` directories,
:mod:`projections.private`). WAL mode and a long busy
timeout let several processes share a file; ``transaction()`` takes the write lock up front
(``BEGIN IMMEDIATE``) so a read-then-write never deadlocks against another writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from projections.private import private_dirs, private_file
from statemachine.errors import ConfigError

__all__ = ["SQLiteDB", "open_read_only", "sqlite_file", "sqlite_path"]

T = TypeVar("T")
_COMPANIONS = ("-wal", "-shm", "-journal")


def sqlite_file(url: str) -> Path:
    """``sqlite:///relative/path`` or ``sqlite:////absolute/path`` → a path (nothing made)."""
    rest = url.split("://", 1)[1]
    if rest.startswith("/"):
        rest = rest[1:]
    if not rest:
        raise ConfigError(f"no file in SQLite URL {url!r}")
    return Path(rest)


def sqlite_path(url: str) -> Path:
    """:func:`sqlite_file`, its parent directories made (``0700``, :mod:`projections.private`)."""
    path = sqlite_file(url)
    private_dirs(path.parent)
    return path


def open_read_only(path: Path) -> sqlite3.Connection | None:
    """A read-only connection to an existing file (``None`` when there is no file): it never
    creates the file, a table or a WAL of its own."""
    if not path.is_file():
        return None
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5.0)


class SQLiteDB:
    """``error`` translates ``sqlite3.Error`` into the caller's exception type."""

    def __init__(self, path: Path, error: Callable[[str, bool], Exception]) -> None:
        self.path = path
        self._error = error
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None
        self._reader: ThreadPoolExecutor | None = None
        self._read_conn: sqlite3.Connection | None = None

    @property
    def started(self) -> bool:
        return self._executor is not None

    async def start(self, schema: str) -> None:
        if self._executor is not None:
            return
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite")
        try:
            await self.run(self._open, schema)
        except BaseException:
            await self.stop()
            raise

    def _open(self, schema: str) -> None:
        # The file made 0600 before SQLite opens it (it would make it 0644), and its WAL and
        # shared-memory files, which SQLite makes with the file's mode, checked once there.
        private_file(self.path, *_COMPANIONS)
        conn = sqlite3.connect(
            self.path, timeout=30.0, isolation_level=None, check_same_thread=False
        )
        conn.execute("PRAGMA journal_mode=WAL")
        private_file(self.path, *_COMPANIONS)
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=30000")
        self._conn = conn
        if schema:
            with self.transaction():
                for statement in schema.split(";\n"):
                    if statement.strip():
                        conn.execute(statement)

    async def stop(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            read_conn, self._read_conn = self._read_conn, None
            if read_conn is not None:
                await asyncio.get_running_loop().run_in_executor(reader, read_conn.close)
            reader.shutdown(wait=True)
        executor, self._executor = self._executor, None
        if executor is None:
            return
        conn, self._conn = self._conn, None
        if conn is not None:
            await asyncio.get_running_loop().run_in_executor(executor, conn.close)
        executor.shutdown(wait=True)

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise self._error("database is not started", False)
        return self._conn

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._executor is None:
            raise self._error(f"{self.path} is not open", False)
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
        except sqlite3.Error as exc:
            retriable = isinstance(exc, sqlite3.OperationalError)
            raise self._error(f"SQLite {self.path}: {exc}", retriable) from exc
        except OverflowError as exc:  # a value SQLite cannot hold: trying again will not help
            raise self._error(f"SQLite {self.path}: {exc}", False) from exc

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(connection)`` on the read-only connection (opened on first use)."""
        if self._executor is None:
            raise self._error(f"{self.path} is not open", False)
        if self._reader is None:
            self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-read")

        def work() -> T:
            if self._read_conn is None:
                conn = sqlite3.connect(
                    self.path, timeout=30.0, isolation_level=None, check_same_thread=False
                )
                conn.execute("PRAGMA busy_timeout=30000")
                conn.execute("PRAGMA query_only=ON")
                self._read_conn = conn
            return fn(self._read_conn)

        try:
            return await asyncio.get_running_loop().run_in_executor(self._reader, work)
        except sqlite3.Error as exc:
            retriable = isinstance(exc, sqlite3.OperationalError)
            raise self._error(f"SQLite {self.path}: {exc}", retriable) from exc

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
