"""Fixtures shared by every test folder: the Workflows simulator and backend pairs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from consumers.workflows.simulator.server import SimulatorServer
from tests.services import kafka_bootstrap, postgres_url

if TYPE_CHECKING:
    from tests.pipeline import Pipeline


# Folders and modules whose tests take seconds each (processes, browsers, generated inputs).
_LONG = (
    "tests/e2e/",
    "tests/chaos/",
    "tests/clients/",
    "tests/consumers/api/ui/",  # the console's browser tests among them
    "tests/consumers/components/test_outcome_feed.py",
    "tests/consumers/eventlog/test_wire",
    "tests/security/",
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long tests first (in their random order), so that parallel workers end on short
    ones rather than one worker on a long test while the others are idle."""
    items.sort(key=lambda item: not item.nodeid.startswith(_LONG))


@pytest.fixture(scope="session")
def _simulator_server() -> Iterator[SimulatorServer]:
    with SimulatorServer() as server:
        yield server


@pytest.fixture
def simulator(_simulator_server: SimulatorServer) -> Iterator[SimulatorServer]:
    """The Workflows API simulator over real HTTP (one server per session, reset per test,
    before and after, so what a test sets — a token, a fault — never reaches another)."""
    _simulator_server.sim.reset()
    yield _simulator_server
    _simulator_server.sim.reset()


@dataclass
class Backend:
    """Where one test keeps its events and its projection (isolated from other tests)."""

    name: str
    event_log_url: str
    database_url: str
    topic_prefix: str
    env: dict[str, str] = field(default_factory=dict)

    def environ(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AUDITREC_")}
        env.update(
            AUDITREC_EVENT_LOG_URL=self.event_log_url,
            AUDITREC_DATABASE_URL=self.database_url,
            AUDITREC_TOPIC_PREFIX=self.topic_prefix,
            AUDITREC_KAFKA_LIFECYCLE_PARTITIONS="3",
        )
        env.update(self.env)
        env.update(extra)
        return env


async def _create_database(admin_url: str, name: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


async def _drop_database(admin_url: str, name: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


def _database_url(admin_url: str, name: str) -> str:
    base, _, _ = admin_url.rpartition("/")
    return f"{base}/{name}"


@contextlib.contextmanager
def kafka_and_postgres(prefix: str, *, partitions: int | None = None) -> Iterator[Backend]:
    """A Kafka + PostgreSQL backend of its own: topics under ``prefix``, a fresh database."""
    admin = postgres_url()
    bootstrap = kafka_bootstrap()
    asyncio.run(_create_database(admin, prefix))
    env = {} if partitions is None else {"AUDITREC_KAFKA_LIFECYCLE_PARTITIONS": str(partitions)}
    try:
        yield Backend(
            "kafka+postgres", f"kafka://{bootstrap}", _database_url(admin, prefix), prefix, env
        )
    finally:
        asyncio.run(_drop_database(admin, prefix))


@contextlib.contextmanager
def backend_pair(
    kind: str, tmp_path: Path, prefix: str, *, partitions: int | None = None
) -> Iterator[Backend]:
    """The ``sqlite`` or ``kafka+postgres`` backend pair (see :data:`BACKEND_PAIRS`)."""
    if kind == "sqlite":
        yield Backend(
            "sqlite", f"sqlite:///{tmp_path}/events.db", f"sqlite:///{tmp_path}/audits.db", prefix
        )
        return
    with kafka_and_postgres(prefix, partitions=partitions) as pair:
        yield pair


BACKEND_PAIRS = [
    "sqlite",
    pytest.param("kafka+postgres", marks=[pytest.mark.kafka, pytest.mark.postgres]),
]


@pytest.fixture(params=BACKEND_PAIRS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each end-to-end test runs on both backend pairs."""
    with backend_pair(request.param, tmp_path, f"t{uuid.uuid4().hex[:10]}") as pair:
        yield pair


@pytest.fixture
async def pipeline(backend: Backend) -> AsyncIterator[Pipeline]:
    """An event log and a projection store of the test's own, on each backend pair."""
    from tests.pipeline import open_pipeline

    async with open_pipeline(backend) as opened:
        yield opened
