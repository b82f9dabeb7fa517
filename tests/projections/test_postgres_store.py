"""The PostgreSQL projection store passes the projection store contract, plus what only
PostgreSQL promises: real column types, concurrent migrations and projectors, the watchdog
index, error translation. Each test gets its own schema, dropped afterwards."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import asyncpg
import pytest

from projections.factory import open_store
from projections.postgres.batch import apply_batch
from projections.postgres.rows import UPDATE_FROM_STAGE
from projections.postgres.store import SCHEMA_VERSION, PostgresStore
from projections.store import ProjectionStore
from projections.values import ParkedEntry, Position
from statemachine.errors import StoreError
from statemachine.events import AuditEvent
from tests.contracts.projection_audits import AuditReadsContract
from tests.contracts.projection_brake import BrakeStoreContract
from tests.contracts.projection_budget import RequestBudgetContract
from tests.contracts.projection_checkpoints import CheckpointStoreContract
from tests.contracts.projection_coordination import CoordinationContract
from tests.contracts.projection_deliveries import OutcomeDeliveriesContract
from tests.contracts.projection_kept import KeptHistoryContract
from tests.contracts.projection_orphans import OrphanInstancesContract
from tests.contracts.projection_store import (
    CONSUMER,
    MakeStore,
    ProjectionStoreContract,
    StoreFixtures,
    at,
    next_offsets,
    observed,
    positioned,
    progressed,
    pure_fold,
    same_row,
    started,
)
from tests.contracts.projection_sweeps import SweepsContract
from tests.contracts.projection_telemetry import SentTelemetryContract
from tests.contracts.projection_writer import ProjectionWriterContract
from tests.services import postgres_url

pytestmark = pytest.mark.postgres


def parked_entry(outcome_id: str, audit_id: str) -> ParkedEntry:
    return ParkedEntry("hook", outcome_id, audit_id, 0, "{}", 3, "HTTP 503", at(1))


PLAN_FILE = Path(__file__).resolve().parents[2] / "bench" / "watchdog_plan.txt"


@pytest.fixture
def pg_url() -> str:
    return postgres_url()


@pytest.fixture
async def schema(pg_url: str) -> AsyncIterator[str]:
    name = f"t_{uuid.uuid4().hex[:16]}"
    yield name
    conn = await asyncpg.connect(pg_url)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    finally:
        await conn.close()


class Postgres(StoreFixtures):
    """A fresh schema per test."""

    @pytest.fixture
    def make_store(self, pg_url: str, schema: str) -> MakeStore:
        return lambda: open_store(pg_url, schema=schema, max_size=4)


class TestPostgresStore(Postgres, ProjectionStoreContract):
    pass


class TestPostgresAudits(Postgres, AuditReadsContract):
    pass


class TestPostgresWriter(Postgres, ProjectionWriterContract):
    async def poison_offsets(self, store: ProjectionStore) -> None:
        assert isinstance(store, PostgresStore)
        await store.pool.execute(
            """
            CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN RAISE EXCEPTION 'poisoned'; END $$;
            CREATE TRIGGER poison BEFORE INSERT ON projector_offsets
                FOR EACH ROW WHEN (NEW.consumer = 'poison') EXECUTE FUNCTION poison();
            """
        )


class TestPostgresKeptHistory(Postgres, KeptHistoryContract):
    pass


class TestPostgresCoordination(Postgres, CoordinationContract):
    pass


class TestPostgresSweeps(Postgres, SweepsContract):
    pass


class TestPostgresBrake(Postgres, BrakeStoreContract):
    pass


class TestPostgresBudget(Postgres, RequestBudgetContract):
    pass


class TestPostgresCheckpoints(Postgres, CheckpointStoreContract):
    pass


class TestPostgresTelemetry(Postgres, SentTelemetryContract):
    pass


class TestPostgresDeliveries(Postgres, OutcomeDeliveriesContract):
    pass


class TestPostgresOrphans(Postgres, OrphanInstancesContract):
    pass


@pytest.fixture
async def pg(pg_url: str, schema: str) -> AsyncIterator[PostgresStore]:
    async with PostgresStore(pg_url, schema=schema, max_size=4) as store:
        yield store


# -- schema and migrations ----------------------------------------------------------------


async def test_migrations_create_typed_tables_in_the_schema(pg: PostgresStore) -> None:
    types = {
        (t, c): d
        for t, c, d in await pg.pool.fetch(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = $1",
            pg.schema,
        )
    }
    assert types[("audits", "started_at")] == "timestamp with time zone"
    assert types[("audits", "last_observed_at")] == "timestamp with time zone"
    assert types[("audits", "overturned")] == "boolean"
    assert types[("audits", "last_event_id")] == "uuid"
    assert types[("audits", "version")] == "bigint"
    assert types[("audit_events", "event_id")] == "uuid"
    assert types[("audit_events", "body")] == "json"  # migration 4
    assert types[("audit_events", "seq")] == "bigint"
    assert types[("audit_events", "offset")] == "bigint"
    assert types[("projector_offsets", "next_offset")] == "bigint"
    assert types[("outcome_parked", "seq")] == "bigint"  # migration 10
    assert types[("outcome_parked", "parked_at")] == "timestamp with time zone"
    assert types[("outcome_parked", "retry_requested_at")] == "timestamp with time zone"
    assert types[("outcome_endpoints", "registered_at")] == "timestamp with time zone"
    assert await pg.pool.fetchval("SELECT max(version) FROM schema_migrations") == SCHEMA_VERSION
    index = await pg.pool.fetchval(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = 'audits_watchdog'",
        pg.schema,
    )
    assert "last_observed_at NULLS FIRST, started_at, audit_id" in index
    assert "WHERE (status = 'running'::text)" in index


async def test_concurrent_first_starts_migrate_once(pg_url: str, schema: str) -> None:
    stores = [PostgresStore(pg_url, schema=schema, max_size=2) for _ in range(4)]
    try:
        await asyncio.gather(*(s.start() for s in stores))
        versions = await asyncio.gather(*(s.init() for s in stores))
        assert versions == [SCHEMA_VERSION] * 4
        rows = await stores[0].pool.fetch("SELECT version FROM schema_migrations ORDER BY 1")
        assert [r[0] for r in rows] == list(range(1, SCHEMA_VERSION + 1))  # each once
    finally:
        await asyncio.gather(*(s.stop() for s in stores))


async def test_schemas_isolate_deployments(pg_url: str, schema: str) -> None:
    other = f"{schema}_b"
    try:
        async with (
            PostgresStore(pg_url, schema=schema) as a,
            PostgresStore(pg_url, schema=other) as b,
        ):
            await a.writer.apply(positioned([started("a-1")]), {}, CONSUMER)
            assert await b.audits.get("a-1") is None
            assert (await a.audits.get("a-1")) is not None
            assert a.coordination.watchdog_key != b.coordination.watchdog_key
            async with (
                a.coordination.watchdog_lock() as held_a,
                b.coordination.watchdog_lock() as held_b,
            ):
                assert held_a and held_b
    finally:
        conn = await asyncpg.connect(pg_url)
        await conn.execute(f'DROP SCHEMA IF EXISTS "{other}" CASCADE')
        await conn.close()


# -- errors -------------------------------------------------------------------------------


async def test_an_unreachable_server_is_retriable_and_the_password_stays_secret() -> None:
    store = PostgresStore("postgresql://auditrec:s3cr3t-pw@127.0.0.1:1/db", schema="x")
    with pytest.raises(StoreError) as info:
        await store.start()
    assert info.value.retriable is True
    assert "s3cr3t-pw" not in str(info.value)
    assert "127.0.0.1:1/db" in str(info.value)
    assert "s3cr3t-pw" not in repr(store)
    await store.stop()  # after a failed start: no error


async def test_a_malformed_url_is_not_retriable_and_not_echoed() -> None:
    store = PostgresStore("postgresql://u:s3cr3t-pw@127.0.0.1:notaport/db")
    with pytest.raises(StoreError) as info:
        await store.start()
    assert info.value.retriable is False
    assert "invalid database URL" in str(info.value)
    assert "s3cr3t-pw" not in str(info.value)


async def test_a_wrong_query_is_not_retriable(pg: PostgresStore) -> None:
    with pytest.raises(StoreError) as info:
        await pg.audits.list_audits(limit=-1)
    assert info.value.retriable is False
    assert "list audits" in str(info.value)


def test_an_invalid_schema_name_is_refused() -> None:
    with pytest.raises(StoreError) as info:
        PostgresStore("postgresql://127.0.0.1/db", schema='x"; DROP TABLE audits; --')
    assert info.value.retriable is False


# -- the watchdog lock ----------------------------------------------------------------------


async def _advisory_locks(store: PostgresStore) -> int:
    key = store.coordination.watchdog_key
    return int(
        await store.pool.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
            "AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = $1",
            key,
        )
    )


async def test_the_watchdog_lock_is_a_session_advisory_lock_never_leaked(
    pg: PostgresStore,
) -> None:
    async with pg.coordination.watchdog_lock() as held:
        assert held is True
        assert await _advisory_locks(pg) == 1
    assert await _advisory_locks(pg) == 0
    with pytest.raises(ZeroDivisionError):
        async with pg.coordination.watchdog_lock():
            1 / 0  # noqa: B018
    assert await _advisory_locks(pg) == 0
    # one store, two overlapping ticks: the second is refused too
    async with pg.coordination.watchdog_lock() as first, pg.coordination.watchdog_lock() as second:
        assert (first, second) == (True, False)
    assert await _advisory_locks(pg) == 0


async def test_a_lost_lock_session_ends_the_tick_quietly(pg: PostgresStore, pg_url: str) -> None:
    async with pg.coordination.watchdog_lock() as held:
        assert held is True
        holder = await pg.pool.fetchval(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 "
            "AND ((classid::bigint << 32) | objid::bigint) = $1",
            pg.coordination.watchdog_key,
        )
        killer = await asyncpg.connect(pg_url)
        try:
            assert await killer.fetchval("SELECT pg_terminate_backend($1)", holder)
        finally:
            await killer.close()
    async with (
        PostgresStore(pg_url, schema=pg.schema) as other,
        other.coordination.watchdog_lock() as free,
    ):
        assert free is True
    await pg.ping()  # the pool replaced the lost connection


# -- concurrent projectors ------------------------------------------------------------------


async def test_two_projectors_on_the_same_audits_never_corrupt_rows(
    pg_url: str, schema: str
) -> None:
    """A rebalance can hand a partition over while the old owner still applies a batch."""
    ids = [f"a-{i:03d}" for i in range(200)]
    events: list[AuditEvent] = [started(a, at(0)) for a in ids]
    for step in range(1, 6):
        events += [progressed(a, at(step), pages_crawled=step) for a in ids]
    events += [observed(a, "running", at(10)) for a in ids[::3]]
    batch = positioned(events)
    async with (
        PostgresStore(pg_url, schema=schema) as one,
        PostgresStore(pg_url, schema=schema) as two,
    ):

        async def project_all(store: PostgresStore, chunk: int) -> int:
            retries = 0
            for i in range(0, len(batch), chunk):
                part = batch[i : i + chunk]
                while True:
                    try:
                        await store.writer.apply(part, next_offsets(part), CONSUMER)
                        break
                    except StoreError as exc:
                        assert exc.retriable, exc
                        retries += 1
            return retries

        await asyncio.gather(project_all(one, 170), project_all(two, 230))
        expected = pure_fold(events)
        for audit_id, row in expected.items():
            assert same_row(await one.audits.get(audit_id), row)
        assert await one.pool.fetchval("SELECT count(*) FROM audit_events") == len(events)


async def test_two_projectors_judge_duplicates_and_conflicts_alike_and_apply_firsts_once(
    pg_url: str, schema: str
) -> None:
    """Two writers racing over the same batches, which repeat events, give event ids other
    content and reuse them under other audits: each key's first content applied once, every
    conflict handed over by one writer or both (never by none), nothing else refused."""
    ids = [f"a-{i:03d}" for i in range(100)]
    events: list[AuditEvent] = [started(a, at(0)) for a in ids]
    steps = [progressed(a, at(1), pages_crawled=1) for a in ids]
    events += steps
    events += [s.model_copy(update={"occurred_at": at(2), "producer": "retry"}) for s in steps]
    clashes = [
        progressed(a, at(3), pages_crawled=9).model_copy(update={"event_id": s.event_id})
        for a, s in zip(ids[::2], steps[::2], strict=True)
    ]
    events += clashes
    reused = [  # another audit's step id, under each audit: another event
        progressed(a, at(4), pages_crawled=4).model_copy(update={"event_id": s.event_id})
        for a, s in zip(ids, steps[1:] + steps[:1], strict=True)
    ]
    events += reused
    batch = positioned(events)
    handed: set[int] = set()
    async with (
        PostgresStore(pg_url, schema=schema) as one,
        PostgresStore(pg_url, schema=schema) as two,
    ):

        async def project_all(store: PostgresStore, chunk: int) -> None:
            for i in range(0, len(batch), chunk):
                part = batch[i : i + chunk]

                async def hand(
                    conflicts: Sequence[tuple[int, str]],
                    part: list[tuple[AuditEvent, Position]] = part,
                ) -> None:
                    handed.update(part[j][1][2] for j, _ in conflicts)

                while True:
                    try:
                        await store.writer.apply(part, next_offsets(part), CONSUMER, None, hand)
                        break
                    except StoreError as exc:
                        assert exc.retriable, exc

        await asyncio.gather(project_all(one, 70), project_all(two, 110))
        applied = events[:200] + reused
        for audit_id, row in pure_fold(applied).items():
            assert same_row(await one.audits.get(audit_id), row)
        assert await one.pool.fetchval("SELECT count(*) FROM audit_events") == len(applied)
        first_clash = len(events) - len(reused) - len(clashes)
        clash_offsets = {o for _, (_, _, o) in batch[first_clash : first_clash + len(clashes)]}
        assert handed == clash_offsets


async def test_a_new_audit_another_writer_inserts_meanwhile_is_a_retriable_loss(
    pg: PostgresStore,
) -> None:
    """When another writer inserts an audit between a batch's read of its rows and its write,
    the batch keeps nothing and is retried (as when it loses a race on an existing row), and
    the retry folds onto that writer's row."""
    batch = positioned([started("a-1", at(0)), progressed("a-1", at(1), pages_crawled=3)])
    other = await pg.pool.acquire()
    try:
        async with other.transaction():  # the other writer: its row is not yet visible
            await other.execute(
                "INSERT INTO audits (audit_id, status, version, updated_at, overturned) "
                "VALUES ('a-1', 'running', 7, now(), false)"
            )
            write = asyncio.create_task(pg.writer.apply(batch, next_offsets(batch), CONSUMER))
            await asyncio.sleep(0.5)  # the copy waits for the other writer's row
            assert not write.done()
        with pytest.raises(StoreError) as lost:
            await write
    finally:
        await pg.pool.release(other)
    assert lost.value.retriable, lost.value
    assert "another writer changed 1 audits" in str(lost.value)
    assert await pg.pool.fetchval("SELECT count(*) FROM audit_events") == 0
    assert await pg.writer.stored_offsets(CONSUMER) == {}
    row = await pg.audits.get("a-1")
    assert row is not None and row.version == 7

    result = await pg.writer.apply(batch, next_offsets(batch), CONSUMER)
    assert result.applied == 2
    row = await pg.audits.get("a-1")
    assert row is not None and row.version == 8 and row.state.pages_crawled == 3


async def test_a_batch_holding_the_start_another_writer_applies_meanwhile_folds_onto_its_row(
    pg: PostgresStore,
) -> None:
    """Two writers hold an audit's start; one commits it while the other's copy waits. The
    other skips the start and folds the rest onto the row just inserted, not onto nothing
    (which kept the rest as history only: the row lost an event and nobody noticed)."""
    start = positioned([started("a-1", at(0))])
    batch = [*start, *positioned([progressed("a-1", at(1), pages_crawled=3)])]
    other = await pg.pool.acquire()
    try:
        async with other.transaction():  # the other writer: its start is not yet visible
            await apply_batch(other, pg.schema, start, {}, "other", None, at(0))
            write = asyncio.create_task(pg.writer.apply(batch, next_offsets(batch), CONSUMER))
            await asyncio.sleep(0.5)  # the copy waits for the other writer's start
            assert not write.done()
        result = await write
    finally:
        await pg.pool.release(other)
    assert result.applied == 1
    row = await pg.audits.get("a-1")
    assert row is not None and same_row(row, pure_fold([e for e, _ in batch])["a-1"])
    assert row.version == 2 and row.state.pages_crawled == 3


# -- the outcome feed's parked entries -------------------------------------------------------


async def test_two_processes_parking_entries_of_one_audit_at_once_lose_and_repeat_nothing(
    pg_url: str, schema: str
) -> None:
    """Two consumers of one partition (a rebalance) park the entries of one audit at once, each
    a batch of its own and one entry both."""
    stores = [PostgresStore(pg_url, schema=schema, max_size=2) for _ in range(2)]
    try:
        await asyncio.gather(*(s.start() for s in stores))
        for round_ in range(10):
            audit = f"a-{round_}"
            batches = [
                [parked_entry(f"{audit}-{who}-{i}", audit) for i in range(3)]
                + [parked_entry(f"{audit}-both", audit)]
                for who in ("a", "b")
            ]
            await asyncio.gather(
                *(s.deliveries.park(b) for s, b in zip(stores, batches, strict=True))
            )

            found = [
                e for e in await stores[0].deliveries.parked(limit=1000) if e.audit_id == audit
            ]
            seqs = [e.seq for e in found]
            assert len(set(seqs)) == len(seqs) == 7 and seqs == sorted(seqs)
            # each batch in its order, one after the other; the entry both parked, once
            names = [e.outcome_id.removeprefix(f"{audit}-") for e in found]
            assert names in (
                ["a-0", "a-1", "a-2", "both", "b-0", "b-1", "b-2"],
                ["b-0", "b-1", "b-2", "both", "a-0", "a-1", "a-2"],
            ), names
    finally:
        await asyncio.gather(*(s.stop() for s in stores))


async def test_a_nul_in_a_parked_entry_is_stored_as_a_replacement_character(
    pg: PostgresStore,
) -> None:
    nul = replace(parked_entry("o-1", "a-1"), error="refused\x00here", body='{"x": "\x00"}')
    await pg.deliveries.park([nul])
    [stored] = await pg.deliveries.parked()
    assert stored.error == "refused\ufffdhere" and stored.body == '{"x": "\ufffd"}'
    await pg.deliveries.park_again("hook", "o-1", 4, "again\x00", at(2))
    assert (await pg.deliveries.parked())[0].error == "again\ufffd"


async def test_an_entry_parked_while_its_audits_retry_is_asked_for_is_asked_for_too(
    pg_url: str, schema: str
) -> None:
    """A consumer parks an entry behind its audit's while an operator asks for the audit's
    retry from another process: whichever comes first, the audit is asked for as a whole."""
    feed, operator = (PostgresStore(pg_url, schema=schema, max_size=2) for _ in range(2))
    try:
        await asyncio.gather(feed.start(), operator.start())
        for round_ in range(20):
            audit = f"a-{round_}"
            await feed.deliveries.park([parked_entry(f"{audit}-1", audit)])
            await asyncio.gather(
                feed.deliveries.park([parked_entry(f"{audit}-2", audit)]),
                operator.deliveries.request_retry("hook", [f"{audit}-1"], "ops", at(5)),
            )
            found = [e for e in await feed.deliveries.parked(limit=1000) if e.audit_id == audit]
            assert [(e.retry_requested_at, e.retry_requested_by) for e in found] == [
                (at(5), "ops")
            ] * 2, round_
    finally:
        await asyncio.gather(feed.stop(), operator.stop())


# -- the watchdog query plan and apply throughput -------------------------------------------


async def test_the_watchdog_query_uses_its_partial_index_on_50k_rows(pg: PostgresStore) -> None:
    await pg.pool.execute(
        """
        INSERT INTO audits (audit_id, project_id, status, current_phase, started_at,
                            last_observed_at, last_observed_status, version, updated_at)
        SELECT 'a-' || lpad(i::text, 6, '0'), 'p-1',
               CASE WHEN i % 10 < 2 THEN 'running' WHEN i % 10 < 8 THEN 'completed'
                    ELSE 'failed' END,
               'crawl',
               $1::timestamptz - make_interval(mins => i % 5000),
               CASE WHEN i % 3 = 0 THEN NULL
                    ELSE $1::timestamptz - make_interval(secs => i % 7919) END,
               'running', 1, now()
        FROM generate_series(1, 50000) AS i
        """,
        at(0),
    )
    await pg.pool.execute("ANALYZE audits")
    cutoff = at(0) - timedelta(minutes=15)
    plan = await pg.audits.explain_stale_running(cutoff, 100)
    print(plan)
    assert "audits_watchdog" in plan
    assert "Seq Scan" not in plan and "Sort" not in plan
    rows = await pg.audits.stale_running(cutoff, 100)
    assert len(rows) == 100
    keys = [
        (r.state.last_observed_at is not None, r.state.last_observed_at, r.state.started_at)
        for r in rows
    ]
    assert keys == sorted(keys, key=lambda k: (k[0], k[1] or at(0), k[2]))
    if os.environ.get("AUDITREC_WRITE_PLAN") == "1":
        PLAN_FILE.write_text(
            "-- PostgresStore.stale_running on 50,000 audits (10,000 running), limit 100\n"
            f"-- {' '.join(pg.audits.watchdog_query.split())}\n\n{plan}\n"
        )


async def test_a_batch_reaches_the_rows_it_updates_through_the_primary_key(
    pg: PostgresStore,
) -> None:
    """The staging table has no statistics: joined by itself, the planner hashed the whole of
    ``audits`` to update a dozen rows (a scan of every row each batch)."""
    await pg.pool.execute(
        "INSERT INTO audits (audit_id, status, version, updated_at, overturned) "
        "SELECT 'a-' || lpad(i::text, 6, '0'), 'running', 1, now(), false "
        "FROM generate_series(1, 40000) AS i"
    )
    await pg.pool.execute("ANALYZE audits")
    updates = [f"a-{i:06d}" for i in range(1, 13)]
    async with pg.pool.acquire() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO pg_temp.auditrec_stage (audit_id, status, overturned, version, expected) "
            "SELECT audit_id, 'running', false, 2, 1 FROM audits WHERE audit_id = ANY($1::text[])",
            updates,
        )
        await conn.execute(  # the batch's new audits
            "INSERT INTO pg_temp.auditrec_stage (audit_id, status, version) "
            "SELECT 'b-' || i, 'running', 1 FROM generate_series(1, 4000) AS i"
        )
        plan = "\n".join(
            r[0] for r in await conn.fetch(f"EXPLAIN {UPDATE_FROM_STAGE}", at(0), updates)
        )
        print(plan)
        assert "Seq Scan on audits" not in plan
        assert await conn.execute(UPDATE_FROM_STAGE, at(0), updates) == "UPDATE 12"


async def test_apply_throughput(pg: PostgresStore) -> None:
    """20k events in batches of 5k (2,000 audits, 10 events each); prints events/s."""
    audits = [f"a-{i:05d}" for i in range(2000)]
    events: list[AuditEvent] = [started(a, at(0), pages_total=100) for a in audits]
    for step in range(1, 9):
        events += [progressed(a, at(step), pages_crawled=step) for a in audits]
    events += [observed(a, "running", at(9)) for a in audits]
    batch = positioned(events)
    began = time.perf_counter()
    for i in range(0, len(batch), 5000):
        part = batch[i : i + 5000]
        result = await pg.writer.apply(part, next_offsets(part), CONSUMER)
        assert result.applied == len(part)
    elapsed = time.perf_counter() - began
    rate = len(events) / elapsed
    print(f"applied {len(events)} events in {elapsed:.2f}s: {rate:,.0f} events/s")
    assert rate > 2000  # a floor for slow CI machines; this box does an order more
    row = await pg.audits.get("a-00042")
    assert row is not None and row.version == 10 and row.state.pages_crawled == 8
