"""The history as PostgreSQL holds it: rows encoded by ``history_copy.py`` read back column by
column, the body stored as json (migration 4), and a history still kept as jsonb (a database
past migration 4's size limit) written alike and converted by a reset."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
import pytest

from projections.postgres.history_copy import COLUMNS, encode_all
from projections.postgres.schema import MIGRATIONS
from projections.postgres.store import PostgresStore
from statemachine.events import EVENT_ADAPTER, AuditEvent
from tests.contracts.projection_store import (
    CONSUMER,
    TOPIC,
    at,
    completed,
    observed,
    progressed,
    started,
)
from tests.services import postgres_url

pytestmark = pytest.mark.postgres


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    name = f"t_{uuid.uuid4().hex[:16]}"
    yield name
    conn = await asyncpg.connect(postgres_url())
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    finally:
        await conn.close()


async def at_version(schema: str, version: int, history: list[AuditEvent]) -> None:
    """A database at schema ``version`` (its migrations applied as released), with
    ``history`` in ``audit_events``."""
    conn = await asyncpg.connect(postgres_url(), server_settings={"search_path": schema})
    try:
        await conn.execute(f'CREATE SCHEMA "{schema}"')
        await conn.execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for applied, ddl in MIGRATIONS[:version]:
            await conn.execute(ddl)
            await conn.execute("INSERT INTO schema_migrations (version) VALUES ($1)", applied)
        for event in history:
            await conn.execute(
                "INSERT INTO audit_events (event_id, audit_id, type, occurred_at, body, "
                "recorded_at) VALUES ($1, $2, $3, $4, $5, now())",
                event.event_id,
                event.audit_id,
                event.type,
                event.occurred_at,
                event.model_dump_json(),
            )
    finally:
        await conn.close()


async def body_type(store: PostgresStore) -> str:
    return str(
        await store.pool.fetchval(
            "SELECT atttypid::regtype::text FROM pg_attribute "
            "WHERE attrelid = 'audit_events'::regclass AND attname = 'body'"
        )
    )


async def test_each_history_column_reads_back_as_the_event_and_the_record_had_it(
    schema: str,
) -> None:
    # given events with and without a cause, one with a NUL in its body, and their JSON as read
    cause = uuid.uuid4()
    events = [
        started("a-1", at(0)),
        observed("a-1", "running", at(1, seconds=0.000123), causation_id=cause),
        completed("a-1", datetime(2026, 11, 30, 9, 0, 0, 999999, tzinfo=UTC)),
    ]
    bodies = [e.model_dump_json().encode() for e in events]
    bodies[2] = bodies[2].replace(b'"producer":"', b'"producer":"nul\\u0000', 1)
    batch = [(e, (TOPIC, 7, 2**40 + i)) for i, e in enumerate(events)]

    # when they are applied
    async with PostgresStore(postgres_url(), schema=schema) as store:
        await store.writer.apply(batch, {(TOPIC, 7): 2**40 + 3}, CONSUMER, bodies)
        recs = await store.pool.fetch(
            'SELECT event_id, audit_id, type, occurred_at, causation_id, topic, partition, "offset",'
            " body::text AS body, recorded_at, seq FROM audit_events ORDER BY seq"
        )
        row = await store.audits.get("a-1")

    # then every column is the event's, in log order, stamped with the row's update time
    assert row is not None
    for rec, event, position in zip(recs, events, batch, strict=True):
        assert rec["event_id"] == event.event_id
        assert (rec["audit_id"], rec["type"]) == (event.audit_id, event.type)
        assert rec["occurred_at"] == event.occurred_at
        assert rec["causation_id"] == event.causation_id
        assert (rec["topic"], rec["partition"], rec["offset"]) == position[1]
        assert rec["recorded_at"] == row.updated_at
    assert recs[1]["causation_id"] == cause
    # and the bodies are the records' JSON as read, the NUL stored as U+FFFD
    assert [r["body"].encode() for r in recs[:2]] == bodies[:2]
    assert json.loads(recs[2]["body"])["producer"] == "nul\ufffdcontract"
    assert EVENT_ADAPTER.validate_json(recs[0]["body"]) == events[0]


async def test_rows_without_a_log_position_are_stored_with_nulls(schema: str) -> None:
    # given history kept without a position (the encoder's rare path) and one with
    events = [started("a-1", at(0)), completed("a-1", at(5))]
    rows = [
        (events[0], None, events[0].model_dump_json().encode()),
        (events[1], (TOPIC, 0, 5), events[1].model_dump_json().encode()),
    ]
    now = datetime(2026, 12, 1, tzinfo=UTC)

    # when they are copied into a table shaped like audit_events
    conn = await asyncpg.connect(postgres_url())
    try:
        await conn.execute(
            "CREATE TEMP TABLE h (event_id uuid, occurred_at timestamptz, partition integer, "
            '"offset" bigint, recorded_at timestamptz, audit_id text, type text, topic text, '
            "causation_id uuid, body json)"
        )
        chunks = list(encode_all(rows, now))
        await conn.copy_to_table(
            "h",
            source=bytearray(b"".join(chunks)),
            columns=COLUMNS,
            schema_name="pg_temp",
            format="binary",
        )
        recs = await conn.fetch('SELECT * FROM h ORDER BY "offset" NULLS FIRST')
    finally:
        await conn.close()

    # then the unplaced row has no topic, partition or offset, and both have the rest
    assert (recs[0]["topic"], recs[0]["partition"], recs[0]["offset"]) == (None, None, None)
    assert (recs[1]["topic"], recs[1]["partition"], recs[1]["offset"]) == (TOPIC, 0, 5)
    assert [r["event_id"] for r in recs] == [e.event_id for e in events]
    assert [r["occurred_at"] for r in recs] == [e.occurred_at for e in events]
    assert {r["recorded_at"] for r in recs} == {now}


async def test_a_history_kept_as_jsonb_is_written_alike_and_a_reset_makes_it_json(
    schema: str,
) -> None:
    # given a database whose history body is still jsonb (too large for migration 4)
    async with PostgresStore(postgres_url(), schema=schema) as store:
        await store.pool.execute("ALTER TABLE audit_events ALTER COLUMN body TYPE jsonb")
        events = [started("a-1", at(0)), completed("a-1", at(5))]
        bodies = [e.model_dump_json().encode() for e in events]

        # when a batch is applied
        await store.writer.apply(
            [(e, (TOPIC, 0, i)) for i, e in enumerate(events)], {}, CONSUMER, bodies
        )

        # then its history reads back as the events
        assert [h.event for h in await store.audits.history("a-1")] == events
        assert await body_type(store) == "jsonb"

        # and a reset (as a rebuild starts) empties the history and makes its body json
        await store.writer.reset(CONSUMER)
        assert await body_type(store) == "json"
        await store.writer.apply(
            [(e, (TOPIC, 0, i)) for i, e in enumerate(events)], {}, CONSUMER, bodies
        )
        assert [h.event for h in await store.audits.history("a-1")] == events


async def test_migration_4_turns_an_existing_jsonb_history_into_json(schema: str) -> None:
    # given a database at schema version 3 with a history row (body jsonb)
    event = started("a-1", at(0))
    await at_version(schema, 3, [event])

    # when a store of this version starts on it
    async with PostgresStore(postgres_url(), schema=schema) as store:
        # then the body is json and the history reads as before
        assert await body_type(store) == "json"
        assert [h.event for h in await store.audits.history("a-1")] == [event]


async def _unique_history_keys(store: PostgresStore) -> list[tuple[str, bool]]:
    """The columns of the history's unique indexes, each with whether it identifies rows."""
    recs = await store.pool.fetch(
        "SELECT a.attname, i.indisreplident FROM pg_index i JOIN pg_attribute a "
        "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
        "WHERE i.indrelid = 'audit_events'::regclass AND i.indisunique ORDER BY a.attnum"
    )
    return [tuple(r) for r in recs]


async def test_migrations_5_and_7_key_the_history_by_audit_and_event_id_and_keep_it(
    schema: str,
) -> None:
    # given a database at schema version 4 with an audit's history of two events
    events = [started("a-1", at(0)), progressed("a-1", at(1), pages_crawled=3)]
    await at_version(schema, 4, events)

    # when a store of this version starts on it
    async with PostgresStore(postgres_url(), schema=schema) as store:
        # then the history's only unique index is (event_id, audit_id), which identifies rows
        assert await _unique_history_keys(store) == [("event_id", True), ("audit_id", True)]
        # … the history reads as before, in order, and an event recorded again is skipped
        assert [h.event for h in await store.audits.history("a-1")] == events
        again = [(events[1], (TOPIC, 0, 9))]
        assert (await store.writer.apply(again, {}, CONSUMER)).skipped == 1
        assert [h.event for h in await store.audits.history("a-1")] == events


async def test_migration_7_lets_an_event_id_name_one_event_in_each_audit(schema: str) -> None:
    # given a database at schema version 6 (event_id unique alone) holding an audit's start
    first = started("a-1", at(0))
    await at_version(schema, 6, [first])

    # when a store of this version starts on it and the same event id comes for another audit
    async with PostgresStore(postgres_url(), schema=schema) as store:
        other = first.model_copy(update={"audit_id": "a-2"})
        result = await store.writer.apply([(other, (TOPIC, 0, 1))], {}, CONSUMER)

        # then it is applied as another event, and the first audit's history is intact
        assert result.applied == 1
        assert [h.event for h in await store.audits.history("a-1")] == [first]
        assert [h.event for h in await store.audits.history("a-2")] == [other]
        assert await _unique_history_keys(store) == [("event_id", True), ("audit_id", True)]


async def test_migration_10_adds_the_outcome_feeds_tables_and_keeps_the_history(
    schema: str,
) -> None:
    # given a database at schema version 9 holding an audit's start
    first = started("a-1", at(0))
    await at_version(schema, 9, [first])

    # when a store of this version starts on it
    async with PostgresStore(postgres_url(), schema=schema) as store:
        # then the history is intact and the outcome feed's tables are there
        assert [h.event for h in await store.audits.history("a-1")] == [first]
        assert await store.deliveries.register("webhook:0", "https://x.example", at(1)) == at(1)
        assert await store.deliveries.parked_counts() == {}
        indexes = {
            r[0]
            for r in await store.pool.fetch(
                "SELECT indexname FROM pg_indexes WHERE schemaname = $1 "
                "AND tablename = 'outcome_parked'",
                schema,
            )
        }
        assert {"outcome_parked_partition", "outcome_parked_audit"} <= indexes


async def test_migration_11_moves_a_failed_audits_time_from_completed_at_to_failed_at(
    schema: str,
) -> None:
    # given a database at schema version 10: a failed audit's failure time in completed_at
    await at_version(schema, 10, [])
    conn = await asyncpg.connect(postgres_url(), server_settings={"search_path": schema})
    try:
        await conn.executemany(
            "INSERT INTO audits (audit_id, status, started_at, completed_at, error_code, "
            "failed_by, version) VALUES ($1, $2, $3, $4, $5, $6, 2)",
            [
                ("a-f", "failed", at(0), at(5), "oom", "workflow"),
                ("a-c", "completed", at(1), at(7), None, None),
                ("a-r", "running", at(2), None, None, None),
            ],
        )
    finally:
        await conn.close()

    # when a store of this version starts on it
    async with PostgresStore(postgres_url(), schema=schema) as store:
        # then the failure's time is failed_at and the failed audit has no completed_at
        failure = await store.audits.get("a-f")
        assert failure is not None and failure.status == "failed"
        assert (failure.state.failed_at, failure.state.completed_at) == (at(5), None)
        # and the others are as they were
        done = await store.audits.get("a-c")
        assert done is not None and (done.state.completed_at, done.state.failed_at) == (at(7), None)
        running = await store.audits.get("a-r")
        assert running is not None and (running.state.completed_at, running.state.failed_at) == (
            None,
            None,
        )
        assert await store.audits.failure_counts(at(5)) == {("oom", None): 1}
