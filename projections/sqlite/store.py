"""The embedded projection store (SQLite): one file, one connection (``connection.py``) shared
by an adapter per port.

Deviations: SQLite has no timestamp type, so timestamps are stored as INTEGER microseconds
since the Unix epoch (UTC) — typed, sortable and exact — and converted at this boundary
(``rows.py``). The watchdog lock is a lease row with an expiry instead of an advisory lock.
"""

from __future__ import annotations

import os
import socket
import uuid

from projections.sqlite.audits import SQLiteAudits
from projections.sqlite.brake import SQLiteBrake
from projections.sqlite.budget import SQLiteBudget
from projections.sqlite.checkpoints import SQLiteCheckpoints
from projections.sqlite.connection import SQLiteDB, sqlite_path
from projections.sqlite.coordination import SQLiteCoordination
from projections.sqlite.deliveries import SQLiteDeliveries
from projections.sqlite.kept import SQLiteKeptHistory
from projections.sqlite.orphans import SQLiteOrphans
from projections.sqlite.schema import SCHEMA, SCHEMA_VERSION, upgrade
from projections.sqlite.sweeps import SQLiteSweeps
from projections.sqlite.telemetry import SQLiteTelemetry
from projections.sqlite.writer import SQLiteWriter
from projections.store import ProjectionStore
from statemachine.errors import StoreError

__all__ = ["SQLiteStore"]


class SQLiteStore(ProjectionStore):
    def __init__(self, url: str) -> None:
        path = sqlite_path(url)
        self.db = SQLiteDB(path, lambda msg, retriable: StoreError(msg, retriable=retriable))
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.audits = SQLiteAudits(self.db)
        self.writer = SQLiteWriter(self.db)
        self.kept = SQLiteKeptHistory(self.db)
        self.coordination = SQLiteCoordination(self.db, self.owner)
        self.sweeps = SQLiteSweeps(self.db)
        self.brake = SQLiteBrake(self.db)
        self.budget = SQLiteBudget(self.db)
        self.checkpoints = SQLiteCheckpoints(self.db)
        self.telemetry = SQLiteTelemetry(self.db)
        self.deliveries = SQLiteDeliveries(self.db)
        self.orphans = SQLiteOrphans(self.db)

    async def start(self) -> None:
        if self.db.started:
            return
        await self.db.start(SCHEMA)

        def work() -> None:
            with self.db.transaction() as conn:
                upgrade(conn)

        try:
            await self.db.run(work)
        except BaseException:
            await self.db.stop()
            raise

    async def stop(self) -> None:
        await self.db.stop()

    async def init(self) -> int:
        def work() -> int:
            with self.db.transaction() as conn:
                row = conn.execute("SELECT version FROM schema_version").fetchone()
                if row is None:
                    conn.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
            return SCHEMA_VERSION

        return await self.db.run(work)

    async def ping(self) -> None:
        await self.db.run(lambda: self.db.conn.execute("SELECT 1").fetchone())
