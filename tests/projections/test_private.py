"""The embedded store's files are private whatever the umask: directories auditrec makes are
0700, the SQLite files and their WAL and shared-memory files 0600; a directory that was there
before keeps its mode, but for auditrec's own data directory."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from projections.factory import open_store
from projections.private import private_dirs, private_file


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The most open umask there is: whatever is not made private explicitly shows."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


async def test_the_store_makes_private_files_in_private_directories(
    tmp_path: Path, open_umask: None
) -> None:
    # given a user directory of the user's own mode
    os.chmod(tmp_path, 0o755)
    data = tmp_path / "state" / "auditrec"

    # when a store is made in directories that are not there yet
    async with open_store(f"sqlite:///{data}/audits.db") as store:
        await store.init()
        await store.audits.get("a-1")  # the read-only connection too
        modes = {p.name: mode(p) for p in data.iterdir()}

    # then every file is 0600, the WAL and shared-memory files too, and the directories made 0700
    assert {"audits.db", "audits.db-wal", "audits.db-shm"} <= set(modes), modes
    assert set(modes.values()) == {0o600}, modes
    assert (mode(data), mode(data.parent)) == (0o700, 0o700)
    # and the user's directory is as it was
    assert mode(tmp_path) == 0o755


async def test_an_older_data_directory_and_database_are_made_private(
    tmp_path: Path, open_umask: None
) -> None:
    # given what an older version left: .auditrec 0755 with a 0644 database and WAL
    data = tmp_path / ".auditrec"
    async with open_store(f"sqlite:///{data}/audits.db") as store:
        await store.init()
    data.chmod(0o755)
    for name in ("audits.db", "audits.db-wal", "audits.db-shm"):
        if (data / name).exists():
            (data / name).chmod(0o644)

    # when this version opens it
    async with open_store(f"sqlite:///{data}/audits.db") as store:
        await store.init()
        modes = {p.name: mode(p) for p in data.iterdir()}

    # then the data directory and every file in it are private
    assert mode(data) == 0o700
    assert set(modes.values()) == {0o600}, modes


def test_a_directory_of_another_name_that_exists_keeps_its_mode(
    tmp_path: Path, open_umask: None
) -> None:
    shared = tmp_path / "srv"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    private_dirs(shared)
    private_dirs(shared / "a" / "b")
    assert (mode(shared), mode(shared / "a"), mode(shared / "a" / "b")) == (0o755, 0o700, 0o700)


def test_a_file_is_made_private_even_under_a_umask_that_takes_more(tmp_path: Path) -> None:
    old = os.umask(0o277)  # would leave 0400 of os.open's 0600
    try:
        private_file(tmp_path / "x.db", "-wal")
        (tmp_path / "x.db-wal").write_bytes(b"")
        private_file(tmp_path / "x.db", "-wal")
    finally:
        os.umask(old)
    assert (mode(tmp_path / "x.db"), mode(tmp_path / "x.db-wal")) == (0o600, 0o600)
