"""The embedded projection store passes the contract of the store and of each of its ports."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from projections.factory import open_store
from projections.sqlite.schema import SCHEMA_VERSION
from projections.sqlite.store import SQLiteStore
from projections.store import ProjectionStore
from tests.contracts.projection_audits import AuditReadsContract
from tests.contracts.projection_brake import BrakeStoreContract
from tests.contracts.projection_budget import RequestBudgetContract
from tests.contracts.projection_checkpoints import CheckpointStoreContract
from tests.contracts.projection_coordination import CoordinationContract
from tests.contracts.projection_deliveries import OutcomeDeliveriesContract
from tests.contracts.projection_kept import KeptHistoryContract
from tests.contracts.projection_orphans import OrphanInstancesContract
from tests.contracts.projection_store import (
    MakeStore,
    ProjectionStoreContract,
    StoreFixtures,
    at,
    completed,
    failed,
    held,
    positioned,
    progressed,
    started,
)
from tests.contracts.projection_sweeps import SweepsContract
from tests.contracts.projection_telemetry import SentTelemetryContract
from tests.contracts.projection_writer import ProjectionWriterContract


class SQLite(StoreFixtures):
    """A fresh file per test."""

    @pytest.fixture
    def make_store(self, tmp_path: Path) -> MakeStore:
        url = f"sqlite:///{tmp_path / 'projection.db'}"
        return lambda: open_store(url)


class TestSQLiteStore(SQLite, ProjectionStoreContract):
    pass


class TestSQLiteAudits(SQLite, AuditReadsContract):
    pass


class TestSQLiteWriter(SQLite, ProjectionWriterContract):
    async def poison_offsets(self, store: ProjectionStore) -> None:
        assert isinstance(store, SQLiteStore)
        conn = sqlite3.connect(store.db.path)
        try:
            conn.execute(
                "CREATE TRIGGER poison BEFORE INSERT ON projector_offsets "
                "WHEN NEW.consumer = 'poison' BEGIN SELECT RAISE(ABORT, 'poisoned'); END"
            )
            conn.commit()
        finally:
            conn.close()


class TestSQLiteKeptHistory(SQLite, KeptHistoryContract):
    pass


class TestSQLiteCoordination(SQLite, CoordinationContract):
    pass


class TestSQLiteSweeps(SQLite, SweepsContract):
    pass


class TestSQLiteBrake(SQLite, BrakeStoreContract):
    pass


class TestSQLiteBudget(SQLite, RequestBudgetContract):
    pass


class TestSQLiteCheckpoints(SQLite, CheckpointStoreContract):
    pass


class TestSQLiteTelemetry(SQLite, SentTelemetryContract):
    pass


class TestSQLiteDeliveries(SQLite, OutcomeDeliveriesContract):
    pass


class TestSQLiteOrphans(SQLite, OrphanInstancesContract):
    pass


def test_open_store_picks_sqlite_by_scheme(tmp_path: Path) -> None:
    assert isinstance(open_store(f"sqlite:///{tmp_path / 'x.db'}"), SQLiteStore)


async def test_a_file_of_schema_version_1_is_upgraded_keeping_its_rows(tmp_path: Path) -> None:
    # given a file as version 1 left it: no hold columns, version 1
    url = f"sqlite:///{tmp_path / 'old.db'}"
    async with open_store(url) as store:
        assert isinstance(store, SQLiteStore)
        await store.init()
        await store.writer.apply(positioned([started("a-old")]), {}, "projector")
    conn = sqlite3.connect(tmp_path / "old.db")
    conn.execute("DROP INDEX audits_held")
    conn.execute("ALTER TABLE audits DROP COLUMN held_decision_id")
    conn.execute("ALTER TABLE audits DROP COLUMN held_at")
    conn.execute("UPDATE schema_version SET version = 1")
    conn.commit()
    conn.close()

    # when this version opens it
    async with open_store(url) as store:
        # then the columns are back, the row is intact and the version is current
        assert await store.init() == SCHEMA_VERSION
        row = await store.audits.get("a-old")
        assert row is not None and row.status == "running" and row.state.held_decision_id is None
        hold = held("a-old")
        await store.writer.apply(positioned([hold]), {}, "projector")
        row = await store.audits.get("a-old")
        assert row is not None and row.state.held_decision_id == str(hold.event_id)


async def test_a_file_of_schema_version_2_gets_the_budget_spender_column(tmp_path: Path) -> None:
    # given a file as version 2 left it: requests recorded without a spender
    url = f"sqlite:///{tmp_path / 'v2.db'}"
    async with open_store(url) as store:
        await store.init()
    conn = sqlite3.connect(tmp_path / "v2.db")
    conn.execute("DROP TABLE api_requests")
    conn.execute("CREATE TABLE api_requests (account TEXT NOT NULL, sent_at INTEGER NOT NULL)")
    conn.execute("INSERT INTO api_requests VALUES ('acct', 1)")
    conn.execute("UPDATE schema_version SET version = 2")
    conn.commit()
    conn.close()

    # when this version opens it
    async with open_store(url) as store:
        # then the old request counts as another spender's and reads have a share of their own
        assert await store.init() == SCHEMA_VERSION
        now = datetime.fromtimestamp(2, UTC)
        assert await store.budget.requests_in_window("acct", now, 10.0, spender="other") == 1
        slot = await store.budget.take_request_slot(
            "acct", now, 3, 10.0, spender="on_demand", share=1
        )
        assert slot.granted
        assert await store.budget.requests_in_window("acct", now, 10.0, spender="on_demand") == 1


async def test_a_file_of_schema_version_5_gets_the_outcome_feeds_tables(tmp_path: Path) -> None:
    # given a file as version 5 left it: no outcome endpoints, nothing parked
    url = f"sqlite:///{tmp_path / 'v5.db'}"
    async with open_store(url) as store:
        await store.init()
        await store.writer.apply(positioned([started("a-1")]), {}, "projector")
    conn = sqlite3.connect(tmp_path / "v5.db")
    conn.executescript(
        "DROP TABLE outcome_parked; DROP TABLE outcome_endpoints; "
        "UPDATE schema_version SET version = 5"
    )
    conn.close()

    # when this version opens it
    async with open_store(url) as store:
        # then the tables are there (with their indexes), the version is current, rows kept
        assert await store.init() == SCHEMA_VERSION
        assert await store.audits.get("a-1") is not None
        when = datetime(2026, 12, 1, tzinfo=UTC)
        assert await store.deliveries.register("webhook:0", "https://x.example", when) == when
        assert await store.deliveries.parked_counts() == {}
    conn = sqlite3.connect(tmp_path / "v5.db")
    indexes = {r[1] for r in conn.execute("PRAGMA index_list(outcome_parked)")}
    assert {"outcome_parked_partition", "outcome_parked_audit"} <= indexes
    assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
    conn.close()


async def test_a_file_of_schema_version_6_moves_a_failures_time_to_failed_at(
    tmp_path: Path,
) -> None:
    # given a file as version 6 left it: no failed_at, a failure's time in completed_at
    url = f"sqlite:///{tmp_path / 'v6.db'}"
    events = [started("a-f", at(0)), failed("a-f", at(5)), started("a-c", at(1))]
    async with open_store(url) as store:
        await store.init()
        await store.writer.apply(positioned([*events, completed("a-c", at(7))]), {}, "projector")
    conn = sqlite3.connect(tmp_path / "v6.db")
    conn.executescript(
        "UPDATE audits SET completed_at = failed_at WHERE status = 'failed'; "
        "ALTER TABLE audits DROP COLUMN failed_at; UPDATE schema_version SET version = 6"
    )
    conn.close()

    # when this version opens it
    async with open_store(url) as store:
        assert await store.init() == SCHEMA_VERSION
        # then the failed audit's time is its failed_at, and it has no completed_at
        failure = await store.audits.get("a-f")
        assert failure is not None and failure.status == "failed"
        assert (failure.state.failed_at, failure.state.completed_at) == (at(5), None)
        # and a completion keeps its completed_at
        done = await store.audits.get("a-c")
        assert done is not None and (done.state.completed_at, done.state.failed_at) == (at(7), None)
        assert await store.audits.failure_counts(at(5)) == {("oom", None): 1}


async def test_a_history_keyed_by_event_id_alone_is_rekeyed_by_audit_and_event_id(
    tmp_path: Path,
) -> None:
    # given a file of schema version 3, whose history is keyed by event_id alone
    url = f"sqlite:///{tmp_path / 'v3.db'}"
    first = started("a-1")
    step = progressed("a-1", pages_crawled=3)
    async with open_store(url) as store:
        await store.init()
        await store.writer.apply(positioned([first, step]), {}, "projector")
    conn = sqlite3.connect(tmp_path / "v3.db")
    rows = conn.execute("SELECT * FROM audit_events ORDER BY seq").fetchall()
    conn.executescript(
        "DROP TABLE audit_events; CREATE TABLE audit_events (seq INTEGER PRIMARY KEY "
        "AUTOINCREMENT, event_id TEXT NOT NULL UNIQUE, audit_id TEXT NOT NULL, type TEXT NOT "
        "NULL, occurred_at INTEGER NOT NULL, causation_id TEXT, topic TEXT, partition INTEGER, "
        '"offset" INTEGER, body TEXT NOT NULL, recorded_at INTEGER NOT NULL); '
        "CREATE INDEX audit_events_audit ON audit_events (audit_id, seq); "
        "UPDATE schema_version SET version = 3"
    )
    conn.executemany(f"INSERT INTO audit_events VALUES ({', '.join('?' * 11)})", rows)
    conn.commit()
    conn.close()

    # when this version opens it and the start's event id comes for another audit
    async with open_store(url) as store:
        assert await store.init() == SCHEMA_VERSION
        other = started("a-2").model_copy(update={"event_id": first.event_id})
        result = await store.writer.apply([(other, ("t", 0, 9))], {}, "projector")

        # then the history is kept row for row, and the other audit's event applied
        assert [h.event for h in await store.audits.history("a-1")] == [first, step]
        assert result.applied == 1
        assert [h.event for h in await store.audits.history("a-2")] == [other]
    conn = sqlite3.connect(tmp_path / "v3.db")
    assert conn.execute("SELECT seq FROM audit_events ORDER BY seq").fetchall()[:2] == [
        (rows[0][0],),
        (rows[1][0],),
    ]
    indexes = {r[1] for r in conn.execute("PRAGMA index_list(audit_events)")}
    assert {"audit_events_audit", "audit_events_causation"} <= indexes
    conn.close()


async def test_a_reader_waiting_for_a_change_wakes_on_a_commit_of_this_or_another_process(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'changes.db'}"
    async with open_store(url) as store:
        await store.init()
        await store.audits.get("warm-up")  # the read connection is open
        # nothing committed: it waits out its timeout
        loop = asyncio.get_running_loop()
        began = loop.time()
        await store.audits.changed(0.3)
        assert loop.time() - began >= 0.29
        # a commit of this process's writer wakes it long before its timeout
        waiting = asyncio.create_task(store.audits.changed(10.0))
        await asyncio.sleep(0.05)
        began = loop.time()
        await store.writer.apply(positioned([started("a-new")]), {}, "projector")
        await asyncio.wait_for(waiting, 2.0)
        assert loop.time() - began < 1.0
        # and so does a commit of another connection (another process)
        waiting = asyncio.create_task(store.audits.changed(10.0))
        await asyncio.sleep(0.05)
        conn = sqlite3.connect(tmp_path / "changes.db")
        conn.execute("UPDATE audits SET project_id = 'p-other'")
        conn.commit()
        conn.close()
        await asyncio.wait_for(waiting, 2.0)


async def test_a_file_of_schema_version_9_gets_the_orphans_tables(tmp_path: Path) -> None:
    # given a file as version 9 left it: no watched workflows, no orphans
    url = f"sqlite:///{tmp_path / 'v9.db'}"
    async with open_store(url) as store:
        await store.init()
    conn = sqlite3.connect(tmp_path / "v9.db")
    conn.executescript(
        "DROP TABLE orphan_history; DROP TABLE orphans; DROP TABLE watched_workflows; "
        "UPDATE schema_version SET version = 9"
    )
    conn.close()

    # when this version opens it, then the tables are there and the version is current
    async with open_store(url) as store:
        assert await store.init() == SCHEMA_VERSION == 10
        when = datetime(2026, 12, 1, tzinfo=UTC)
        assert await store.orphans.watch(["site-audit"], when) == {"site-audit": when}
        assert await store.orphans.open_counts() == {}
    conn = sqlite3.connect(tmp_path / "v9.db")
    assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
    conn.close()
