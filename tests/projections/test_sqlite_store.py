"""The embedded projection store passes the projection store contract."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from projections.factory import open_store
from projections.sqlite.store import SQLiteStore
from projections.store import ProjectionStore
from tests.contracts.projection_store import MakeStore, ProjectionStoreContract


class TestSQLiteStore(ProjectionStoreContract):
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
