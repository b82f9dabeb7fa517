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
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NoReturn

import asyncpg

from projections.postgres.batch import apply_batch
from projections.postgres.brake import PostgresBrake
from projections.postgres.changes import ChangeFeed, channel_of
from projections.postgres.checkpoints import PostgresCheckpoints
from projections.postgres.coordination import PostgresCoordination, advisory_key, event_uuids
from projections.postgres.errors import DRIVER_ERRORS, describe_url, redact, translate
from projections.postgres.histories import fetch_histories
from projections.postgres.kept import PostgresKeptHistory
from projections.postgres.limits import PostgresLimits
from projections.postgres.rows import SELECT_ROWS, decode_row, init_connection
from projections.postgres.schema import BODY_AS_JSON, SCHEMA_VERSION, create_schema, migrate
from projections.row import AuditRow
from projections.store import ApplyResult, HistoryEntry, Position, ProjectionStore
from statemachine.errors import StoreError
from statemachine.events import EVENT_ADAPTER, AuditEvent

__all__ = ["SCHEMA_VERSION", "PostgresStore"]

_STALE_RUNNING = (
    f"{SELECT_ROWS} WHERE status = 'running' AND started_at < $1 "
    "ORDER BY last_observed_at NULLS FIRST, started_at, audit_id LIMIT $2"
)

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


class PostgresStore(
    PostgresCoordination,
    PostgresLimits,
    PostgresBrake,
    PostgresCheckpoints,
    PostgresKeptHistory,
    ProjectionStore,
):
    watchdog_query = _STALE_RUNNING

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
        guarded by the version each row was folded from and one ``INSERT ... ON CONFLICT DO
        NOTHING`` for new audits); upsert the offsets. A lost race with another writer is a
        retriable :class:`StoreError`.
        """
        now = datetime.now(UTC)
        with self._errors(f"apply {len(events)} events"):
            async with self.pool.acquire() as conn, conn.transaction():
                applied, lost = await apply_batch(
                    conn, self.schema, events, offsets, consumer, bodies, now
                )
                if applied:  # readers waiting for an outcome look again at commit
                    await conn.execute("SELECT pg_notify($1, '')", self._channel)
                if lost:  # raised inside the transaction: nothing of the batch is kept
                    raise StoreError(
                        f"PostgreSQL {self._where} (schema {self.schema}): another writer "
                        f"changed {lost} audits of this batch concurrently; retry",
                        retriable=True,
                    )
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

    # -- reads ----------------------------------------------------------------------------

    async def get(self, audit_id: str) -> AuditRow | None:
        with self._errors(f"get audit {audit_id}"):
            rec = await self.pool.fetchrow(f"{SELECT_ROWS} WHERE audit_id = $1", audit_id)
        return decode_row(rec) if rec is not None else None

    async def list_audits(
        self,
        *,
        status: str | None = None,
        project: str | None = None,
        code: str | None = None,
        started_before: datetime | None = None,
        limit: int = 100,
        after: tuple[datetime, str] | None = None,
        shadow: bool = False,
    ) -> list[AuditRow]:
        where: list[str] = []
        args: list[Any] = []
        for column, value in (("status", status), ("project_id", project), ("error_code", code)):
            if value is not None:
                args.append(value)
                where.append(f"{column} = ${len(args)}")
        if started_before is not None:
            args.append(started_before)
            where.append(f"started_at < ${len(args)}")
        if after is not None:
            args.extend(after)
            where.append(f"(started_at, audit_id) < (${len(args) - 1}, ${len(args)})")
        if shadow:
            where.append(
                "status = 'running' AND EXISTS (SELECT 1 FROM audit_events e WHERE "
                "e.audit_id = audits.audit_id AND e.type = 'AuditFailureSimulated')"
            )
        args.append(limit)
        sql = (
            SELECT_ROWS
            + (" WHERE " + " AND ".join(where) if where else "")
            + f" ORDER BY started_at DESC, audit_id DESC LIMIT ${len(args)}"
        )
        with self._errors("list audits"):
            recs = await self.pool.fetch(sql, *args)
        return [decode_row(r) for r in recs]

    async def history(self, audit_id: str) -> list[HistoryEntry]:
        with self._errors(f"history of audit {audit_id}"):
            recs = await self.pool.fetch(
                'SELECT body, topic, partition, "offset", recorded_at FROM audit_events '
                "WHERE audit_id = $1 ORDER BY seq",
                audit_id,
            )
        return [
            HistoryEntry(
                EVENT_ADAPTER.validate_json(body),
                (t, p, o) if t is not None else None,
                rec,
            )
            for body, t, p, o, rec in recs
        ]

    async def histories(self, audit_ids: Sequence[str]) -> dict[str, list[HistoryEntry]]:
        with self._errors("histories of audits"):
            return await fetch_histories(self.pool, audit_ids)

    async def caused_by(self, causation_ids: Iterable[str]) -> list[AuditEvent]:
        ids = event_uuids(causation_ids)
        if not ids:
            return []
        with self._errors("read caused events"):
            recs = await self.pool.fetch(
                "SELECT body FROM audit_events WHERE causation_id = ANY($1::uuid[]) ORDER BY seq",
                ids,
            )
        return [EVENT_ADAPTER.validate_json(r[0]) for r in recs]

    async def stale_running(self, started_before: datetime, limit: int) -> list[AuditRow]:
        with self._errors("select stale running audits"):
            recs = await self.pool.fetch(_STALE_RUNNING, started_before, limit)
        return [decode_row(r) for r in recs]

    async def explain_stale_running(
        self, started_before: datetime, limit: int, *, analyze: bool = True
    ) -> str:
        """The plan of the watchdog query (``EXPLAIN (ANALYZE, BUFFERS)`` by default)."""
        options = "ANALYZE, BUFFERS" if analyze else "COSTS"
        with self._errors("explain the watchdog query"):
            recs = await self.pool.fetch(
                f"EXPLAIN ({options}) {_STALE_RUNNING}", started_before, limit
            )
        return "\n".join(r[0] for r in recs)

    async def count_by_status(self) -> dict[str, int]:
        with self._errors("count audits"):
            recs = await self.pool.fetch("SELECT status, count(*) FROM audits GROUP BY status")
        return {s: n for s, n in recs}

    async def failure_counts(self, since: datetime) -> dict[tuple[str, str | None], int]:
        with self._errors("count failures"):
            recs = await self.pool.fetch(
                "SELECT error_code, reconciled_by, count(*) FROM audits WHERE status = 'failed' "
                "AND completed_at >= $1 GROUP BY error_code, reconciled_by",
                since,
            )
        return {(code, by): n for code, by, n in recs}

    async def running_summary(self, started_before: datetime) -> tuple[int, datetime | None]:
        with self._errors("summarise running audits"):
            rec = await self.pool.fetchrow(
                "SELECT count(*) FILTER (WHERE started_at < $1), min(started_at) FROM audits "
                "WHERE status = 'running'",
                started_before,
            )
        assert rec is not None
        return int(rec[0]), rec[1]

    async def iter_rows(self, batch: int = 1000) -> AsyncIterator[AuditRow]:
        """Keyset batches: no connection or transaction is held between batches."""
        last = ""
        while True:
            with self._errors("iterate audits"):
                recs = await self.pool.fetch(
                    f"{SELECT_ROWS} WHERE audit_id > $1 ORDER BY audit_id LIMIT $2", last, batch
                )
            if not recs:
                return
            for rec in recs:
                yield decode_row(rec)
            last = recs[-1][0]
