"""What auditrec writes on the embedded backends is private under an ordinary umask (022): the
SQLite files of the projection and the event log, their WAL and shared-memory files, are 0600
and the directories it makes 0700; the directory it was started in keeps its mode. Real
``serve`` and ``demo`` processes."""

from __future__ import annotations

import re
import signal
import stat
import subprocess
from pathlib import Path

import httpx

from consumers.workflows.simulator.server import SimulatorServer
from tests.cli import AUDITREC
from tests.consumers.api.conftest import free_port
from tests.eventually import eventually_sync

UMASK = 0o022  # what most systems give a service: files 0644, directories 0755


def ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2.0).status_code == 200
    except httpx.TransportError:
        return False


def test_a_serve_on_the_embedded_backends_keeps_its_files_private(
    tmp_path: Path, env: dict[str, str], simulator: SimulatorServer
) -> None:
    # given a serve started in a directory of the user's, with the default data directory
    tmp_path.chmod(0o755)
    env = {k: v for k, v in env.items() if k not in ("AUDITREC_EVENT_LOG_URL",
                                                      "AUDITREC_DATABASE_URL")}  # fmt: skip
    port = free_port()
    env |= {
        "AUDITREC_CLOUDFLARE_API_URL": simulator.url,
        "AUDITREC_CLOUDFLARE_ACCOUNT_ID": "a",
        "AUDITREC_API_PORT": str(port),
    }
    data = tmp_path / ".auditrec"
    log = tmp_path.parent / f"{tmp_path.name}-serve.log"  # outside the directory inspected
    with log.open("w") as err:
        serve = subprocess.Popen(
            [AUDITREC, "serve"],
            cwd=tmp_path,
            env=env,
            umask=UMASK,
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
        )
    try:
        # when it runs (the API up, every database open, with its WAL)
        wal = ["audits.db", "audits.db-wal", "audits.db-shm", "events.db", "events.db-wal"]
        eventually_sync(
            lambda: ready(port) and all((data / name).exists() for name in wal),
            message="serve to come up with both databases open",
            timeout=30,
        )
        # and serving, its signal handlers installed (a SIGTERM before that ends it at once)
        eventually_sync(
            lambda: re.search(r"\bserving\b", log.read_text()) is not None,
            message="serve to serve",
            timeout=30,
        )
        running = {p.name: stat.S_IMODE(p.stat().st_mode) for p in data.iterdir()}
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.communicate(timeout=30)
        stderr = log.read_text()
    assert serve.returncode == 0, stderr[-2000:]

    # then while it ran and once it stopped, its files were 0600 and its directory 0700
    assert set(wal) <= set(running) and set(running.values()) == {0o600}, running
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    after = {p.name: stat.S_IMODE(p.stat().st_mode) for p in data.iterdir()}
    assert after and set(after.values()) == {0o600}, after
    # and the directory it was started in is as it was
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o755


def test_the_demo_keeps_its_files_private(tmp_path: Path, env: dict[str, str]) -> None:
    tmp_path.chmod(0o755)
    work = tmp_path / "demo" / "run"
    done = subprocess.run(
        [AUDITREC, "demo", "--dir", str(work)],
        env=env,
        umask=UMASK,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]

    files = {p.name: stat.S_IMODE(p.stat().st_mode) for p in work.iterdir()}
    assert {"audits.db", "events.db"} <= set(files) and set(files.values()) == {0o600}, files
    made = [stat.S_IMODE(d.stat().st_mode) for d in (work, work.parent)]
    assert made == [0o700, 0o700]
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o755
