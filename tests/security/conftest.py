"""What the attack tests share: an environment for a real ``auditrec`` process on the
embedded backends (nothing of this process's ``AUDITREC_*`` leaks in), and an API served
without tokens on loopback, as a default ``serve`` runs."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from consumers.workflows.simulator.server import SimulatorServer
from tests.consumers.api.conftest import LiveServer, free_port, server_settings
from tests.e2e.serving import AUDITREC
from tests.eventually import eventually_sync


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


@contextlib.contextmanager
def serving(env: dict[str, str], log: Path, *args: str, token: str | None = None) -> Iterator[str]:
    """``auditrec serve ARGS`` as a real process on a free port until the block ends (SIGTERM,
    then it must exit 0); yields the API's URL once it answers ``GET /audits`` (with
    ``token``)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with log.open("w") as sink:
        process = subprocess.Popen(
            [AUDITREC, "serve", *args],
            env={**env, "AUDITREC_API_PORT": str(port)},
            stdout=sink,
            stderr=sink,
        )

    def ready() -> int | None:
        if process.poll() is not None:
            raise AssertionError(f"serve exited: {log.read_text()[-3000:]}")
        try:
            return httpx.get(f"{url}/audits", headers=headers, timeout=5).status_code
        except httpx.TransportError:
            return None

    try:
        eventually_sync(ready, until=lambda s: s == 200, timeout=90, message="serve answers")
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    assert code == 0, log.read_text()[-3000:]
