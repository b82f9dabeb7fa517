"""The production projection store (PostgreSQL via asyncpg, one connection pool).

Deviations from the port's documentation, and what PostgreSQL adds:

- ``schema``: every table lives in that schema (created when missing; the pool's connections
  set ``search_path`` to it), so several deployments or tests can share one database.
- Migrations are versioned (``schema_migrations``) and run under a transaction-level
  advisory lock, so ``init()`` (also run by ``start()``) is safe twice and from several
  processes at once.
- Concurrency of :meth:`PostgresStore.apply`: one projector owns a partition (Kafka consumer
  group) and an audit lives in one partition, so writers normally never meet, and ``apply``
  takes no row locks up front. They may meet during a rebalance or a rebuild; correctness does
  not depend on ownership: a row is written only if it still has the ``version`` it was folded
  from, a new row only if nobody inserted it meanwhile, and an event only once (unique
  ``event_id``). A lost race aborts the whole transaction with a *retriable*
  :class:`StoreError`; the retry reloads and skips what the other writer applied.
- Coordination (the watchdog lock, heartbeats, sent telemetry) is in ``coordination.py``; the
  watchdog's advisory-lock key is derived from the schema, so each deployment has its own.
- ``reset()`` truncates (it briefly blocks readers of the projection), and turns a history
  body still kept as ``jsonb`` (schema.py, migration 4) into ``json``.
- PostgreSQL text cannot hold NUL characters: a NUL in a text column or in an event body is
  stored as U+FFFD.
- Event ids (``telemetry_sent``, ``caused_by``) are ``uuid``: a string that is not a UUID
  matches nothing, and marking one as sent is a non-retriable error.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import NoReturn

import asyncpg

from projections.postgres.batch import apply_batch
from projections.postgres.brake import PostgresBrake
from projections.postgres.changes import ChangeFeed, channel_of
from projections.postgres.checkpoints import PostgresCheckpoints
from projections.postgres.coordination import PostgresCoordination, advisory_key
from projections.postgres.errors import DRIVER_ERRORS, describe_url, redact, translate
from projections.postgres.kept import PostgresKeptHistory
from projections.postgres.limits import PostgresLimits
from projections.postgres.reads import STALE_RUNNING, PostgresReads
from projections.postgres.rows import init_connection
from projections.postgres.schema import BODY_AS_JSON, SCHEMA_VERSION, create_schema, migrate
from projections.store import ProjectionStore
from projections.values import ApplyResult, Position
from statemachine.errors import StoreError
from statemachine.events import AuditEvent

__all__ = ["SCHEMA_VERSION", "PostgresStore"]

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


class PostgresStore(
    PostgresReads,
    PostgresCoordination,
    PostgresLimits,
    PostgresBrake,
    PostgresCheckpoints,
    PostgresKeptHistory,
    ProjectionStore,
):
    watchdog_query = STALE_RUNNING

    def __init__(
        self,
        url: str,
        *,
        schema: str = "public",
        min_size: int = 1,
        max_size: int = 10,
        command_timeout: float | None = 60.0,
    ) -> None:
        if not _IDENTIFIER.match(schema):
            raise StoreError(f"invalid PostgreSQL schema name {schema!r}", retriable=False)
        self._url = url
        self.schema = schema
        self._where, self._password = describe_url(url)
        self._min_size = min_size
        self._max_size = max_size
        self._command_timeout = command_timeout
        self._pool: asyncpg.Pool | None = None
        self._start_lock = asyncio.Lock()
        self.watchdog_key = advisory_key("watchdog", schema)
        self._migration_key = advisory_key("migrate", schema)
        self._channel = channel_of(schema)
        self._changes = ChangeFeed(self._listener_connection, self._channel)

    def __repr__(self) -> str:
        return f"PostgresStore({self._where!r}, schema={self.schema!r})"

    # -- errors ---------------------------------------------------------------------------

    def _fail(self, what: str, exc: BaseException) -> NoReturn:
        raise translate(
            exc, what, where=self._where, schema=self.schema, password=self._password
        ) from exc

    def _redact(self, text: str) -> str:
        return redact(text, self._password)

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except StoreError:
            raise
        except DRIVER_ERRORS as exc:
            self._fail(what, exc)

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StoreError(f"{self!r} is not started", retriable=False)
        return self._pool

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        async with self._start_lock:
            if self._pool is not None:
                return
            with self._errors("connect"):
                try:
                    pool = await asyncpg.create_pool(
                        self._url,
                        min_size=self._min_size,
                        max_size=self._max_size,
                        command_timeout=self._command_timeout,
                        server_settings={
                            "search_path": f'"{self.schema}"',
                            "application_name": "auditrec",
                        },
                        init=init_connection,
                    )
                except ValueError as exc:  # a malformed URL: say so without echoing it
                    raise StoreError(
                        f"PostgreSQL {self._where}: invalid database URL "
                        f"({self._redact(str(exc))})",
                        retriable=False,
                    ) from None
            self._pool = pool
            try:
                await self._migrate()
            except BaseException:
                await self.stop()
                raise

    async def _listener_connection(self) -> asyncpg.Connection:
        conn: asyncpg.Connection = await asyncpg.connect(
            self._url, server_settings={"application_name": "auditrec-listener"}, timeout=5
        )
        return conn

    async def changed(self, timeout: float) -> None:
        await self._changes.wait(timeout)

    async def stop(self) -> None:
        await self._changes.stop()
        pool, self._pool = self._pool, None
        if pool is None:
            return
        try:
            await asyncio.wait_for(pool.close(), timeout=10)
        except (TimeoutError, asyncpg.InterfaceError, OSError):
            pool.terminate()

    async def init(self) -> int:
        return await self._migrate()

    async def _migrate(self) -> int:
        with self._errors("migrate"):
            async with self.pool.acquire() as conn:
                await create_schema(conn, self.schema)
                async with conn.transaction():
                    return await migrate(conn, self._migration_key)

    async def ping(self) -> None:
        with self._errors("ping"):
            await self.pool.fetchval("SELECT 1")

    # -- apply ----------------------------------------------------------------------------

    async def apply(
        self,
        events: Sequence[tuple[AuditEvent, Position]],
        offsets: Mapping[tuple[str, int], int],
        consumer: str,
        bodies: Sequence[bytes | None] | None = None,
    ) -> ApplyResult:
        """One transaction of a handful of statements, whatever the batch size: load the
        affected rows (``= ANY``); stream the history with binary ``COPY`` while folding, so
        folding overlaps the server's work (an event recorded before makes the unique
        ``event_id`` refuse the copy, which is then made again without the recorded events);
        write each changed audit once (``COPY`` into a temporary table, then one ``UPDATE``
        guarded by the version each row was folded from and one ``INSERT`` for new audits);
        upsert the offsets. A lost race with another writer is a
        retriable :class:`StoreError`.
        """
        now = datetime.now(UTC)
        with self._errors(f"apply {len(events)} events"):
            async with self.pool.acquire() as conn, conn.transaction():
                applied, lost = await apply_batch(
                    conn, self.schema, events, offsets, consumer, bodies, now
                )
                if lost:  # raised inside the transaction: nothing of the batch is kept
                    raise StoreError(
                        f"PostgreSQL {self._where} (schema {self.schema}): another writer "
                        f"changed {lost} audits of this batch concurrently; retry",
                        retriable=True,
                    )
                if applied:  # readers waiting for an outcome look again at commit
                    await conn.execute("SELECT pg_notify($1, '')", self._channel)
        return ApplyResult(applied=applied, skipped=len(events) - applied)

    async def stored_offsets(self, consumer: str) -> dict[tuple[str, int], int]:
        with self._errors("read offsets"):
            recs = await self.pool.fetch(
                "SELECT topic, partition, next_offset FROM projector_offsets WHERE consumer = $1",
                consumer,
            )
        return {(t, p): n for t, p, n in recs}

    async def reset(self, consumer: str) -> None:
        with self._errors("reset"):
            async with self.pool.acquire() as conn, conn.transaction():
                await conn.execute("TRUNCATE audits, audit_events")
                await conn.execute(BODY_AS_JSON)  # instant on the empty table
                await conn.execute("DELETE FROM projector_offsets WHERE consumer = $1", consumer)
