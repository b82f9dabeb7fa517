"""What the attack tests share: an environment for a real ``auditrec`` process on the
embedded backends (nothing of this process's ``AUDITREC_*`` leaks in), and an API served
without tokens on loopback, as a default ``serve`` runs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from consumers.workflows.simulator.server import SimulatorServer
from tests.consumers.api.conftest import LiveServer, server_settings


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("AUDITREC_")}
    return {
        **base,
        "AUDITREC_EVENT_LOG_URL": f"sqlite:///{tmp_path}/events.db",
        "AUDITREC_DATABASE_URL": f"sqlite:///{tmp_path}/audits.db",
        "AUDITREC_API_PORT": "0",
        "AUDITREC_LOG_FORMAT": "console",
    }


@pytest.fixture(scope="module")
def open_api(
    tmp_path_factory: pytest.TempPathFactory, _simulator_server: SimulatorServer
) -> Iterator[LiveServer]:
    """``serve --only api`` as a default start runs it: no tokens, on 127.0.0.1."""
    settings = server_settings(tmp_path_factory.mktemp("open"), _simulator_server)
    with LiveServer(["api"], **settings) as server:
        yield server
