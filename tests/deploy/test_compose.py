"""``docker-compose.yml`` with the event subscription, read as written and run as processes (no
Docker engine needed): given ``AUDITREC_CLOUDFLARE_QUEUE_ID``, the simulator service serves that
queue and the auditrec service's ``serve`` pulls it; without it, the simulator has no queue."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.consumers.api.conftest import free_port
from tests.deploy.conftest import ROOT
from tests.deploy.test_kubernetes import pulls
from tests.e2e.serving import AUDITREC
from tests.eventually import eventually_sync
from tests.security.test_deployment import interpolate

QUEUE = "site-audit-events"
SIMULATOR_PORT = "8787"  # what the compose file says; each test takes a free loopback port


def services() -> dict[str, Any]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    found: dict[str, Any] = compose["services"]
    return found


def as_compose_reads(value: str, shell: dict[str, str]) -> str:
    """``value`` after compose's interpolation from ``shell`` (``$$`` is a literal ``$``)."""
    return interpolate(value.replace("$$", "\0"), shell).replace("\0", "$")


def environment(service: dict[str, Any], shell: dict[str, str], **extra: str) -> dict[str, str]:
    """A process's environment: none of this one's ``AUDITREC_*``, the service's (from
    ``shell``), ``extra``, and ``auditrec`` first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUDITREC_")}
    env.update({k: as_compose_reads(str(v), shell) for k, v in service["environment"].items()})
    env.update(extra)
    env["PATH"] = f"{Path(AUDITREC).parent}:{env.get('PATH', '')}"
    return env


@contextlib.contextmanager
def running(
    command: list[str], env: dict[str, str], log: Path, stopped: tuple[int, ...] = (0,)
) -> Iterator[None]:
    """``command`` until the block ends (SIGTERM, then it must exit with one of ``stopped``)."""
    with log.open("w") as sink:
        process = subprocess.Popen(command, env=env, stdout=sink, stderr=sink)
        try:
            yield
            assert process.poll() is None, log.read_text()[-3000:]
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                code = process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                raise
    assert code in stopped, log.read_text()[-3000:]


@contextlib.contextmanager
def simulator(shell: dict[str, str], tmp_path: Path) -> Iterator[str]:
    """The simulator service's command on a free port; its root URL once it answers."""
    service = services()["simulator"]
    command = [as_compose_reads(str(part), shell) for part in service["command"]]
    port = str(free_port())
    listen = f"--host 0.0.0.0 --port {SIMULATOR_PORT}"
    assert listen in command[-1]
    command[-1] = command[-1].replace(listen, f"--host 127.0.0.1 --port {port}")
    root = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{root}/_sim/stats", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    # uvicorn ends on SIGTERM as the signal would (-15), after a graceful shutdown
    with running([*service["entrypoint"], *command], environment(service, shell),
                 tmp_path / "simulator.log", stopped=(0, -signal.SIGTERM)):  # fmt: skip
        eventually_sync(up, timeout=30, interval=0.2, message="the simulator to answer")
        yield root


def test_without_a_queue_id_the_simulator_serves_no_queue(tmp_path: Path) -> None:
    declared = services()["auditrec"]["environment"]
    assert as_compose_reads(declared["AUDITREC_CLOUDFLARE_QUEUE_ID"], {}) == ""  # off

    with simulator({}, tmp_path) as root:
        assert httpx.get(f"{root}/_sim/queues/{QUEUE}", timeout=5).status_code == 404


def test_with_a_queue_id_serve_pulls_the_simulators_queue(tmp_path: Path) -> None:
    # given `AUDITREC_CLOUDFLARE_QUEUE_ID=… docker compose --profile simulator up`
    shell = {"AUDITREC_CLOUDFLARE_QUEUE_ID": QUEUE, "AUDITREC_CLOUDFLARE_ACCOUNT_ID": "acct-1"}
    with simulator(shell, tmp_path) as root:
        # then the simulator serves that queue ...
        assert httpx.get(f"{root}/_sim/queues/{QUEUE}", timeout=5).status_code == 200

        # ... and the auditrec service's command, with its settings, pulls it
        service = services()["auditrec"]
        port = free_port()
        shell |= {
            "AUDITREC_CLOUDFLARE_API_URL": f"{root}/client/v4",
            "AUDITREC_API_TOKENS": "ops:compose-token-0123456789:operate",
        }
        env = environment(
            service,
            shell,
            AUDITREC_EVENT_LOG_URL=f"sqlite:///{tmp_path}/events.db",
            AUDITREC_DATABASE_URL=f"sqlite:///{tmp_path}/audits.db",
            AUDITREC_API_HOST="127.0.0.1",  # 0.0.0.0 in the container; loopback here
            AUDITREC_API_PORT=str(port),
        )
        assert env["AUDITREC_CLOUDFLARE_QUEUE_ID"] == QUEUE
        command = [*service["entrypoint"], *service["command"]]
        with running(command, env, tmp_path / "serve.log"):

            def metrics() -> str:
                try:
                    return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
                except httpx.TransportError:
                    return ""

            exposition = eventually_sync(
                metrics,
                until=lambda text: pulls(text).get("empty", 0) >= 1,
                timeout=60,
                interval=0.2,
                message="a pull of the queue",
            )
        assert set(pulls(exposition)) == {"empty"}
        stats = httpx.get(f"{root}/_sim/queues/{QUEUE}", timeout=5).json()
        assert stats["pulls"] >= 1 and stats["pull_errors"] == 0
