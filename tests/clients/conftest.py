"""A real ``auditrec serve`` (all components, the Workflows simulator behind its probe) for the
client tests, one per module and backend pair, behind a bearer token; and a faulty proxy in
front of it per test."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from consumers.workflows.simulator.server import SimulatorServer
from tests.clients.proxy import FaultyProxy
from tests.conftest import BACKEND_PAIRS, backend_pair
from tests.consumers.api.conftest import free_port
from tests.eventually import eventually_sync

AUDITREC = str(Path(sys.executable).with_name("auditrec"))
TOKEN = "publisher-token-0123456789"
VIEWER = "viewer-token-0123456789"  # a token of scope read


@dataclass(frozen=True)
class Serve:
    url: str
    port: int
    token: str
    log: Path


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


@contextlib.contextmanager
def running_serve(env: dict[str, str], port: int, log: Path) -> Iterator[Serve]:
    init = subprocess.run([AUDITREC, "init"], env=env, capture_output=True, text=True, timeout=120)
    assert init.returncode == 0, init.stderr[-2000:]
    url = f"http://127.0.0.1:{port}"
    with log.open("w") as sink:
        serve = subprocess.Popen([AUDITREC, "serve"], env=env, stdout=sink, stderr=sink)
        try:
            eventually_sync(
                lambda: serve.poll() is None and _healthy(url),
                timeout=60,
                message=f"serve to answer /healthz (log: {log})",
            )
            yield Serve(url, port, TOKEN, log)
        finally:
            serve.send_signal(signal.SIGTERM)
            try:
                serve.wait(timeout=30)
            except subprocess.TimeoutExpired:
                serve.kill()
                serve.wait()


@pytest.fixture(scope="module", params=BACKEND_PAIRS)
def serve(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    _simulator_server: SimulatorServer,
) -> Iterator[Serve]:
    tmp = tmp_path_factory.mktemp("serve")
    with backend_pair(request.param, tmp, f"c{uuid.uuid4().hex[:10]}") as pair:
        port = free_port()
        env = pair.environ(
            AUDITREC_API_PORT=str(port),
            AUDITREC_METRICS_PORT="0",
            AUDITREC_API_TOKENS=f"{TOKEN},viewer:{VIEWER}:read",
            AUDITREC_CLOUDFLARE_API_URL=_simulator_server.url,
            AUDITREC_CLOUDFLARE_ACCOUNT_ID="acct-1",
            AUDITREC_LOG_FORMAT="json",
        )
        with running_serve(env, port, tmp / "serve.log") as served:
            yield served


@pytest.fixture
def proxy(serve: Serve) -> Iterator[FaultyProxy]:
    with FaultyProxy(serve.port) as p:
        yield p


def audit_id() -> str:
    return f"a-{uuid.uuid4().hex[:12]}"
