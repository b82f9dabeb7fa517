"""The embedded projection store passes the projection store contract."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from projections.factory import open_store
from projections.sqlite.schema import SCHEMA_VERSION
from projections.sqlite.store import SQLiteStore
from projections.store import ProjectionStore
from tests.contracts.projection_histories import HistoriesContract
from tests.contracts.projection_store import (
    MakeStore,
    ProjectionStoreContract,
    held,
    positioned,
    started,
)


class TestSQLiteStore(ProjectionStoreContract, HistoriesContract):
    @pytest.fixture
    def make_store(self, tmp_path: Path) -> MakeStore:
        url = f"sqlite:///{tmp_path / 'projection.db'}"
        return lambda: open_store(url)

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


def test_open_store_picks_sqlite_by_scheme(tmp_path: Path) -> None:
    assert isinstance(open_store(f"sqlite:///{tmp_path / 'x.db'}"), SQLiteStore)


async def test_a_file_of_schema_version_1_is_upgraded_keeping_its_rows(tmp_path: Path) -> None:
    # given a file as version 1 left it: no hold columns, version 1
    url = f"sqlite:///{tmp_path / 'old.db'}"
    async with open_store(url) as store:
        assert isinstance(store, SQLiteStore)
        await store.init()
        await store.apply(positioned([started("a-old")]), {}, "projector")
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
        assert await store.init() == SCHEMA_VERSION == 2
        row = await store.get("a-old")
        assert row is not None and row.status == "running" and row.state.held_decision_id is None
        hold = held("a-old")
        await store.apply(positioned([hold]), {}, "projector")
        row = await store.get("a-old")
        assert row is not None and row.state.held_decision_id == str(hold.event_id)
