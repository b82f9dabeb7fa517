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
- The watchdog lock is a session advisory lock (``pg_try_advisory_lock``) on a connection held
  for the tick; its key is derived from the schema, so each deployment has its own.
- ``reset()`` truncates (it briefly blocks readers of the projection).
- PostgreSQL text cannot hold NUL characters: a NUL in a text column or in an event body is
  stored as U+FFFD.
- Event ids (``telemetry_sent``, ``caused_by``) are ``uuid``: a string that is not a UUID
  matches nothing, and marking one as sent is a non-retriable error.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import operator
import re
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NoReturn
from urllib.parse import unquote, urlsplit

import asyncpg

from statemachine.events import EVENT_ADAPTER, AuditEvent
from statemachine.state import AuditState

from .errors import StoreError
from .row import STATE_FIELDS, AuditRow, project
from .store import ApplyResult, HistoryEntry, Position, ProjectionStore

__all__ = ["SCHEMA_VERSION", "PostgresStore"]

ROW_TYPES: dict[str, str] = {
    "audit_id": "text",
    "status": "text",
    "project_id": "text",
    "organization_id": "text",
    "started_by_user_id": "text",
    "start_url": "text",
    "workflow_instance_id": "text",
    "current_phase": "text",
    "pages_crawled": "bigint",
    "pages_total": "bigint",
    "started_at": "timestamptz",
    "completed_at": "timestamptz",
    "error_code": "text",
    "error_detail": "text",
    "failed_phase": "text",
    "failed_by": "text",
    "reconciled_by": "text",
    "last_observed_status": "text",
    "last_observed_at": "timestamptz",
    "instance_ended_at": "timestamptz",
    "overturned": "boolean",
    "version": "bigint",
    "last_event_id": "uuid",
    "updated_at": "timestamptz",
}
ROW_COLUMNS: tuple[str, ...] = (*STATE_FIELDS, "version", "last_event_id", "updated_at")
assert set(ROW_COLUMNS) == set(ROW_TYPES), "ROW_TYPES must cover every row column"
_TEXT = tuple(i for i, c in enumerate(ROW_COLUMNS) if ROW_TYPES[c] == "text")
_N_STATE = len(STATE_FIELDS)

_MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
CREATE TABLE audits (
    audit_id text COLLATE "C" PRIMARY KEY,
    project_id text, organization_id text, started_by_user_id text, start_url text,
    workflow_instance_id text, status text COLLATE "C" NOT NULL, current_phase text,
    pages_crawled bigint, pages_total bigint,
    started_at timestamptz, completed_at timestamptz,
    error_code text, error_detail text, failed_phase text, failed_by text, reconciled_by text,
    last_observed_status text, last_observed_at timestamptz, instance_ended_at timestamptz,
    overturned boolean NOT NULL DEFAULT false,
    version bigint NOT NULL,
    last_event_id uuid,
    updated_at timestamptz
) WITH (fillfactor = 80);  -- room on each page for HOT updates: a row changes many times
-- The watchdog: status = 'running' AND started_at < $1
--   ORDER BY last_observed_at NULLS FIRST, started_at, audit_id LIMIT $2
CREATE INDEX audits_watchdog ON audits (last_observed_at NULLS FIRST, started_at, audit_id)
    WHERE status = 'running';
CREATE INDEX audits_listing ON audits (status, started_at, audit_id);
CREATE INDEX audits_started ON audits (started_at, audit_id);
CREATE TABLE audit_events (
    seq bigserial PRIMARY KEY,
    event_id uuid NOT NULL UNIQUE,
    audit_id text COLLATE "C" NOT NULL,
    type text NOT NULL,
    occurred_at timestamptz NOT NULL,
    causation_id uuid,
    topic text, partition integer, "offset" bigint,
    body jsonb NOT NULL,
    recorded_at timestamptz NOT NULL
);
CREATE INDEX audit_events_audit ON audit_events (audit_id, seq);
CREATE INDEX audit_events_causation ON audit_events (causation_id)
    WHERE causation_id IS NOT NULL;
CREATE TABLE projector_offsets (
    consumer text NOT NULL, topic text NOT NULL, partition integer NOT NULL,
    next_offset bigint NOT NULL,
    PRIMARY KEY (consumer, topic, partition)
);
CREATE TABLE processes (
    process text NOT NULL, component text NOT NULL, last_seen timestamptz NOT NULL,
    PRIMARY KEY (process, component)
);
CREATE TABLE telemetry_sent (event_id uuid PRIMARY KEY, sent_at timestamptz NOT NULL);
""",
    ),
)
SCHEMA_VERSION = _MIGRATIONS[-1][0]

_SELECT = f"SELECT {', '.join(ROW_COLUMNS)} FROM audits"
_LOAD_ROWS = f"{_SELECT} WHERE audit_id = ANY($1::text[])"
# Rows are written through a per-connection temporary table: binary COPY in, then one
# UPDATE and one INSERT from it. (COPY encodes values cheaply; array parameters for
# `unnest` cost the client ~3x more per value in asyncpg.)
_STAGE = "auditrec_stage"
_STAGE_COLUMNS = (*ROW_COLUMNS, "expected")
_CREATE_STAGE = (
    f"CREATE TEMP TABLE IF NOT EXISTS {_STAGE} ("
    + ", ".join(f"{c} {ROW_TYPES[c]}" for c in ROW_COLUMNS).replace(
        "audit_id text", 'audit_id text COLLATE "C"'
    )
    + ", expected bigint) ON COMMIT DELETE ROWS"
)
# Optimistic concurrency: a row is written only if it still has the version it was folded
# from (`expected`); `version` counts the audit's events, so it grows with every write.
_UPDATE_FROM_STAGE = (
    "UPDATE audits AS a SET "
    + ", ".join(f"{c} = s.{c}" for c in ROW_COLUMNS if c != "audit_id")
    + f" FROM pg_temp.{_STAGE} AS s"
    " WHERE s.expected IS NOT NULL AND a.audit_id = s.audit_id AND a.version = s.expected"
)
_INSERT_FROM_STAGE = (
    f"INSERT INTO audits ({', '.join(ROW_COLUMNS)}) "
    f"SELECT {', '.join(ROW_COLUMNS)} FROM pg_temp.{_STAGE} WHERE expected IS NULL "
    "ON CONFLICT (audit_id) DO NOTHING"
)
_HISTORY_COLUMNS = (
    "event_id",
    "audit_id",
    "type",
    "occurred_at",
    "causation_id",
    "topic",
    "partition",
    "offset",
    "body",
    "recorded_at",
)
_OFFSETS = (
    "INSERT INTO projector_offsets (consumer, topic, partition, next_offset) "
    "SELECT $1, * FROM unnest($2::text[], $3::integer[], $4::bigint[]) "
    "ON CONFLICT (consumer, topic, partition) DO UPDATE SET next_offset = excluded.next_offset"
)
_STALE_RUNNING = (
    f"{_SELECT} WHERE status = 'running' AND started_at < $1 "
    "ORDER BY last_observed_at NULLS FIRST, started_at, audit_id LIMIT $2"
)

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
# SQLSTATEs worth retrying: connection (08), transaction rollback (40: serialization failure,
# deadlock), insufficient resources (53), operator intervention (57: shutdown, cancel,
# cannot connect now), lock not available, system errors (58), read-only after a failover.
_RETRIABLE_PREFIXES = ("08", "40", "53", "57", "58")
_RETRIABLE_STATES = frozenset({"55P03", "25006"})
_DRIVER_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
    OSError,
    TimeoutError,
)
# A concurrent writer recorded the same event / inserted the same audit first.
_CONCURRENT_WRITE = frozenset({"audit_events_event_id_key", "audits_pkey"})


def _advisory_key(purpose: str, schema: str) -> int:
    digest = hashlib.blake2b(f"auditrec:{purpose}:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


_PASSWORD = re.compile(r"^[a-z]+://[^:/@]*:([^@/]*)@", re.IGNORECASE)


def _describe(url: str) -> tuple[str, str | None]:
    """``host:port/db`` for error messages (never user or password), and the password."""
    found = _PASSWORD.match(url)
    password = unquote(found.group(1)) if found and found.group(1) else None
    try:
        parts = urlsplit(url)
        return f"{parts.hostname or 'localhost'}:{parts.port or 5432}{parts.path or '/'}", password
    except ValueError:
        return "postgresql://…", password


def _clean(value: str) -> str:
    return value.replace("\x00", "\ufffd")


def _clean_json(value: Any) -> Any:
    if isinstance(value, str):
        return _clean(value)
    if isinstance(value, dict):
        return {_clean(k): _clean_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean_json(v) for v in value]
    return value


_state_values = operator.attrgetter(*STATE_FIELDS)


def _encode_row(row: AuditRow, now: datetime, expected: int | None) -> tuple[Any, ...]:
    return (*_state_values(row.state), row.version, row.last_event_id, now, expected)


def _without_nul(values: tuple[Any, ...]) -> tuple[Any, ...]:
    out = list(values)
    for i in _TEXT:
        if out[i] is not None and "\x00" in out[i]:
            out[i] = _clean(out[i])
    return tuple(out)


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.execute(_CREATE_STAGE)


def _terminate(conn: asyncpg.Connection) -> None:
    with contextlib.suppress(Exception):  # a connection the pool already dropped
        conn.terminate()


def _decode_row(rec: Sequence[Any]) -> AuditRow:
    last = rec[_N_STATE + 1]
    return AuditRow(
        state=AuditState(*rec[:_N_STATE]),
        version=rec[_N_STATE],
        last_event_id=uuid.UUID(bytes=last.bytes) if last is not None else None,
        updated_at=rec[_N_STATE + 2],
    )


def _uuids(values: Iterable[Any]) -> list[uuid.UUID]:
    out = []
    for value in values:
        if isinstance(value, uuid.UUID):
            out.append(value)
            continue
        try:
            out.append(uuid.UUID(str(value)))
        except ValueError:
            continue  # not an event id: matches nothing
    return out


class PostgresStore(ProjectionStore):
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
        self._where, self._password = _describe(url)
        self._min_size = min_size
        self._max_size = max_size
        self._command_timeout = command_timeout
        self._pool: asyncpg.Pool | None = None
        self._start_lock = asyncio.Lock()
        self.watchdog_key = _advisory_key("watchdog", schema)
        self._migration_key = _advisory_key("migrate", schema)

    def __repr__(self) -> str:
        return f"PostgresStore({self._where!r}, schema={self.schema!r})"

    # -- errors ---------------------------------------------------------------------------

    def _fail(self, what: str, exc: BaseException) -> NoReturn:
        retriable = False
        if isinstance(exc, asyncpg.PostgresError):
            state = exc.sqlstate or ""
            retriable = state.startswith(_RETRIABLE_PREFIXES) or state in _RETRIABLE_STATES
            if state == "23505" and getattr(exc, "constraint_name", None) in _CONCURRENT_WRITE:
                retriable = True
                what = f"{what} (a concurrent writer applied the same audits)"
        elif isinstance(
            exc,
            OSError
            | TimeoutError
            | asyncpg.exceptions.ConnectionDoesNotExistError
            | asyncpg.exceptions.InternalClientError,
        ):
            retriable = True
        detail = self._redact(f"{type(exc).__name__}: {exc}")
        raise StoreError(
            f"PostgreSQL {self._where} (schema {self.schema}): {what}: {detail}",
            retriable=retriable,
        ) from exc

    def _redact(self, text: str) -> str:
        return text.replace(self._password, "***") if self._password else text

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except StoreError:
            raise
        except _DRIVER_ERRORS as exc:
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
                        init=_init_connection,
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

    async def stop(self) -> None:
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
                await self._create_schema(conn)
                async with conn.transaction():
                    return await self._migrate_locked(conn)

    async def _create_schema(self, conn: asyncpg.Connection) -> None:
        """Outside the migration's transaction: a transaction that waited for the advisory
        lock may still see the catalog as before the lock (no invalidations are processed
        on taking an advisory lock), and with a missing schema that means a duplicate."""
        exists = await conn.fetchval(
            "SELECT true FROM pg_namespace WHERE nspname = $1", self.schema
        )
        if exists:
            return  # no CREATE privilege on the database needed
        with contextlib.suppress(asyncpg.UniqueViolationError, asyncpg.DuplicateSchemaError):
            await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')

    async def _migrate_locked(self, conn: asyncpg.Connection) -> int:
        await conn.execute("SELECT pg_advisory_xact_lock($1)", self._migration_key)
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            "version integer PRIMARY KEY, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        current = await conn.fetchval("SELECT coalesce(max(version), 0) FROM schema_migrations")
        for version, ddl in _MIGRATIONS:
            if version > current:
                await conn.execute(ddl)
                await conn.execute("INSERT INTO schema_migrations (version) VALUES ($1)", version)
                current = version
        return int(current)

    async def ping(self) -> None:
        with self._errors("ping"):
            await self.pool.fetchval("SELECT 1")

    # -- apply ----------------------------------------------------------------------------

    async def apply(
        self,
        events: Sequence[tuple[AuditEvent, Position]],
        offsets: Mapping[tuple[str, int], int],
        consumer: str,
    ) -> ApplyResult:
        """One transaction of a handful of statements, whatever the batch size: load the
        affected rows and the already-recorded event ids (``= ANY``); stream the history with
        binary ``COPY`` while folding, so folding overlaps the server's work; write each
        changed audit once (``COPY`` into a temporary table, then one ``UPDATE`` guarded by
        the version each row was folded from and one ``INSERT ... ON CONFLICT DO NOTHING``
        for new audits); upsert the offsets. A lost race with another writer is a retriable
        :class:`StoreError`.
        """
        now = datetime.now(UTC)
        with self._errors(f"apply {len(events)} events"):
            async with self.pool.acquire() as conn, conn.transaction():
                rows, fresh = await self._load(conn, events)
                folded_from = {audit_id: row.version for audit_id, row in rows.items()}
                changed: dict[str, AuditRow] = {}
                nul = False

                def fold() -> Iterator[tuple[Any, ...]]:
                    nonlocal nul
                    for event, (topic, partition, offset) in fresh:
                        row = project(rows.get(event.audit_id), event)
                        rows[event.audit_id] = row
                        if row.state.exists:
                            changed[event.audit_id] = row
                        body = event.model_dump_json()
                        if "\\u0000" in body:  # jsonb and text refuse NUL: rare, slow path
                            nul = True
                            body = json.dumps(_clean_json(json.loads(body)), ensure_ascii=False)
                        yield (
                            event.event_id,
                            event.audit_id,
                            event.type,
                            event.occurred_at,
                            event.causation_id,
                            topic,
                            partition,
                            offset,
                            body,
                            now,
                        )

                if fresh:
                    await conn.copy_records_to_table(
                        "audit_events",
                        records=fold(),
                        columns=_HISTORY_COLUMNS,
                        schema_name=self.schema,
                    )
                if changed:
                    await self._write_rows(conn, changed, folded_from, now, nul)
                if offsets:
                    keys = list(offsets)
                    await conn.execute(
                        _OFFSETS,
                        consumer,
                        [t for t, _ in keys],
                        [p for _, p in keys],
                        [offsets[k] for k in keys],
                    )
        return ApplyResult(applied=len(fresh), skipped=len(events) - len(fresh))

    async def _load(
        self, conn: asyncpg.Connection, events: Sequence[tuple[AuditEvent, Position]]
    ) -> tuple[dict[str, AuditRow], list[tuple[AuditEvent, Position]]]:
        """The affected rows, and the events not recorded yet (first of duplicates)."""
        if not events:
            return {}, []
        rows: dict[str, AuditRow] = {}
        for rec in await conn.fetch(_LOAD_ROWS, list({e.audit_id for e, _ in events})):
            row = _decode_row(rec)
            rows[row.audit_id] = row
        seen = {
            uuid.UUID(bytes=r[0].bytes)
            for r in await conn.fetch(
                "SELECT event_id FROM audit_events WHERE event_id = ANY($1::uuid[])",
                list({e.event_id for e, _ in events}),
            )
        }
        fresh = []
        for item in events:
            if item[0].event_id not in seen:
                seen.add(item[0].event_id)
                fresh.append(item)
        return rows, fresh

    async def _write_rows(
        self,
        conn: asyncpg.Connection,
        changed: Mapping[str, AuditRow],
        folded_from: Mapping[str, int],
        now: datetime,
        nul: bool,
    ) -> None:
        # Rows come from stored rows (never NUL) and this batch's events: only a NUL in an
        # event can put one in a row.
        staged = [
            _encode_row(changed[audit_id], now, folded_from.get(audit_id))
            for audit_id in sorted(changed)
        ]
        if nul:
            staged = [_without_nul(values) for values in staged]
        await conn.copy_records_to_table(
            _STAGE, records=staged, columns=_STAGE_COLUMNS, schema_name="pg_temp"
        )
        updates = sum(1 for audit_id in changed if audit_id in folded_from)
        written = 0
        if updates:
            status = await conn.execute(_UPDATE_FROM_STAGE)
            written += int(status.rsplit(" ", 1)[-1])
        if updates < len(staged):
            status = await conn.execute(_INSERT_FROM_STAGE)
            written += int(status.rsplit(" ", 1)[-1])
        if written != len(staged):
            raise StoreError(
                f"PostgreSQL {self._where} (schema {self.schema}): another writer changed "
                f"{len(staged) - written} audits of this batch concurrently; retry",
                retriable=True,
            )

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
                await conn.execute("DELETE FROM projector_offsets WHERE consumer = $1", consumer)

    # -- reads ----------------------------------------------------------------------------

    async def get(self, audit_id: str) -> AuditRow | None:
        with self._errors(f"get audit {audit_id}"):
            rec = await self.pool.fetchrow(f"{_SELECT} WHERE audit_id = $1", audit_id)
        return _decode_row(rec) if rec is not None else None

    async def list_audits(
        self,
        *,
        status: str | None = None,
        limit: int = 100,
        after: tuple[datetime, str] | None = None,
    ) -> list[AuditRow]:
        where: list[str] = []
        args: list[Any] = []
        if status is not None:
            args.append(status)
            where.append(f"status = ${len(args)}")
        if after is not None:
            args.extend(after)
            where.append(f"(started_at, audit_id) < (${len(args) - 1}, ${len(args)})")
        args.append(limit)
        sql = (
            _SELECT
            + (" WHERE " + " AND ".join(where) if where else "")
            + f" ORDER BY started_at DESC, audit_id DESC LIMIT ${len(args)}"
        )
        with self._errors("list audits"):
            recs = await self.pool.fetch(sql, *args)
        return [_decode_row(r) for r in recs]

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

    async def caused_by(self, causation_ids: Iterable[str]) -> list[AuditEvent]:
        ids = _uuids(causation_ids)
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
        return [_decode_row(r) for r in recs]

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

    async def iter_rows(self, batch: int = 1000) -> AsyncIterator[AuditRow]:
        """Keyset batches: no connection or transaction is held between batches."""
        last = ""
        while True:
            with self._errors("iterate audits"):
                recs = await self.pool.fetch(
                    f"{_SELECT} WHERE audit_id > $1 ORDER BY audit_id LIMIT $2", last, batch
                )
            if not recs:
                return
            for rec in recs:
                yield _decode_row(rec)
            last = recs[-1][0]

    # -- coordination ---------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def watchdog_lock(self) -> AsyncIterator[bool]:
        with self._errors("take the watchdog lock"):
            conn = await self.pool.acquire()
        held = False
        try:
            with self._errors("take the watchdog lock"):
                held = bool(
                    await conn.fetchval("SELECT pg_try_advisory_lock($1)", self.watchdog_key)
                )
            yield held
        finally:
            try:
                if held:
                    await conn.fetchval("SELECT pg_advisory_unlock($1)", self.watchdog_key)
            except Exception:
                _terminate(conn)  # whatever went wrong, ending the session releases its locks
            except BaseException:
                _terminate(conn)
                raise
            finally:
                # A session the server ended is already back in the pool.
                with contextlib.suppress(Exception):
                    await self.pool.release(conn)

    async def heartbeat(self, process: str, components: Sequence[str], now: datetime) -> None:
        if not components:
            return
        with self._errors("heartbeat"):
            await self.pool.execute(
                "INSERT INTO processes (process, component, last_seen) "
                "SELECT $1, c, $3 FROM unnest($2::text[]) AS c "
                "ON CONFLICT (process, component) DO UPDATE SET last_seen = excluded.last_seen",
                process,
                list(dict.fromkeys(components)),
                now,
            )

    async def live_components(self, since: datetime) -> dict[str, list[str]]:
        with self._errors("read live components"):
            recs = await self.pool.fetch(
                "SELECT component, process FROM processes WHERE last_seen >= $1 "
                "ORDER BY component, process",
                since,
            )
        out: dict[str, list[str]] = {}
        for component, process in recs:
            out.setdefault(component, []).append(process)
        return out

    async def forget_process(self, process: str) -> None:
        with self._errors("forget process"):
            await self.pool.execute("DELETE FROM processes WHERE process = $1", process)

    # -- telemetry bookkeeping ------------------------------------------------------------

    async def telemetry_sent(self, event_ids: Iterable[str]) -> set[str]:
        asked: dict[uuid.UUID, set[str]] = {}
        for raw in event_ids:
            for key in _uuids([raw]):
                asked.setdefault(key, set()).add(raw)
        if not asked:
            return set()
        with self._errors("read sent telemetry"):
            recs = await self.pool.fetch(
                "SELECT event_id FROM telemetry_sent WHERE event_id = ANY($1::uuid[])",
                list(asked),
            )
        return {raw for r in recs for raw in asked[r[0]]}

    async def mark_telemetry_sent(self, event_id: str, at: datetime) -> None:
        try:
            key = uuid.UUID(str(event_id))
        except ValueError:
            raise StoreError(
                f"telemetry event id {event_id!r} is not a UUID", retriable=False
            ) from None
        with self._errors("mark telemetry sent"):
            await self.pool.execute(
                "INSERT INTO telemetry_sent (event_id, sent_at) VALUES ($1, $2) "
                "ON CONFLICT (event_id) DO NOTHING",
                key,
                at,
            )
