"""The production projection store (PostgreSQL via asyncpg): one connection pool
(``connection.py``) shared by an adapter per port.

Deviations from the ports' documentation, and what PostgreSQL adds:

- ``schema``: every table lives in that schema (created when missing; the pool's connections
  set ``search_path`` to it), so several deployments or tests can share one database.
- Migrations are versioned (``schema_migrations``) and run under a transaction-level
  advisory lock, so ``init()`` (also run by ``start()``) is safe twice and from several
  processes at once.
- The projector's concurrent writers, and its reset: ``writer.py``. Advisory-lock keys are
  derived from the schema, so each deployment has its own (``coordination.py``).
- The outcome feed's writes to an endpoint's parked entries take turns on the endpoint's
  advisory lock (``deliveries.py``), so an audit's entries are never split by a race.
- PostgreSQL text cannot hold NUL characters: a NUL in a text column or in an event body is
  stored as U+FFFD.
- Event ids (``telemetry_sent``, ``caused_by``) are ``uuid``: a string that is not a UUID
  matches nothing, and marking one as sent is a non-retriable error.
"""

from __future__ import annotations

import asyncio

import asyncpg

from projections.postgres.audits import PostgresAudits
from projections.postgres.brake import PostgresBrake
from projections.postgres.budget import PostgresBudget
from projections.postgres.changes import ChangeFeed, channel_of
from projections.postgres.checkpoints import PostgresCheckpoints
from projections.postgres.connection import PostgresDB, advisory_key
from projections.postgres.coordination import PostgresCoordination
from projections.postgres.deliveries import PostgresDeliveries
from projections.postgres.kept import PostgresKeptHistory
from projections.postgres.orphans import PostgresOrphans
from projections.postgres.schema import SCHEMA_VERSION, create_schema, migrate
from projections.postgres.sweeps import PostgresSweeps
from projections.postgres.telemetry import PostgresTelemetry
from projections.postgres.writer import PostgresWriter
from projections.store import ProjectionStore

__all__ = ["SCHEMA_VERSION", "PostgresStore"]


class PostgresStore(ProjectionStore):
    def __init__(
        self,
        url: str,
        *,
        schema: str = "public",
        min_size: int = 1,
        max_size: int = 10,
        command_timeout: float | None = 60.0,
    ) -> None:
        self.db = PostgresDB(
            url,
            schema=schema,
            min_size=min_size,
            max_size=max_size,
            command_timeout=command_timeout,
        )
        self.schema = schema
        self._start_lock = asyncio.Lock()
        self._migration_key = advisory_key("migrate", schema)
        channel = channel_of(schema)
        self._changes = ChangeFeed(self._listener_connection, channel)
        self.audits = PostgresAudits(self.db, self._changes)
        self.writer = PostgresWriter(self.db, channel)
        self.kept = PostgresKeptHistory(self.db)
        self.coordination = PostgresCoordination(self.db)
        self.sweeps = PostgresSweeps(self.db)
        self.brake = PostgresBrake(self.db)
        self.budget = PostgresBudget(self.db)
        self.checkpoints = PostgresCheckpoints(self.db)
        self.telemetry = PostgresTelemetry(self.db)
        self.deliveries = PostgresDeliveries(self.db)
        self.orphans = PostgresOrphans(self.db)

    def __repr__(self) -> str:
        return repr(self.db)

    @property
    def pool(self) -> asyncpg.Pool:
        return self.db.pool

    async def start(self) -> None:
        async with self._start_lock:
            if self.db.opened:
                return
            await self.db.open()
            try:
                await self._migrate()
            except BaseException:
                await self.stop()
                raise

    async def _listener_connection(self) -> asyncpg.Connection:
        conn: asyncpg.Connection = await asyncpg.connect(
            self.db.url, server_settings={"application_name": "auditrec-listener"}, timeout=5
        )
        return conn

    async def stop(self) -> None:
        await self._changes.stop()
        await self.db.close()

    async def init(self) -> int:
        return await self._migrate()

    async def _migrate(self) -> int:
        with self.db.errors("migrate"):
            async with self.db.pool.acquire() as conn:
                await create_schema(conn, self.schema)
                async with conn.transaction():
                    return await migrate(conn, self._migration_key)

    async def ping(self) -> None:
        with self.db.errors("ping"):
            await self.db.pool.fetchval("SELECT 1")
