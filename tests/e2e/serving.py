"""A real ``auditrec serve`` process with its API on a free port, for the end-to-end tests
that talk to it as a client would."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.consumers.api.conftest import free_port
from tests.eventually import eventually_sync

AUDITREC = str(Path(sys.executable).with_name("auditrec"))


@contextlib.contextmanager
def serving(
    env: dict[str, str],
    log: Path,
    *args: str,
    ready: str = "/readyz",
    token: str | None = None,
    port_variable: str = "AUDITREC_API_PORT",
) -> Iterator[str]:
    """``auditrec serve ARGS`` as a real process on a free port until the block ends (SIGTERM,
    then it must exit 0); yields the API's base URL once ``GET ready`` (with ``token``)
    answers 200. A serve without the API is reached on its metrics port
    (``port_variable="AUDITREC_METRICS_PORT"``, ``ready="/metrics"``)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with log.open("w") as sink:
        process = subprocess.Popen(
            [AUDITREC, "serve", *args],
            env={**env, port_variable: str(port)},
            stdout=sink,
            stderr=sink,
        )

        def answer() -> int | None:
            if process.poll() is not None:
                raise AssertionError(f"serve exited: {log.read_text()[-3000:]}")
            try:
                return httpx.get(f"{url}{ready}", headers=headers, timeout=5).status_code
            except httpx.TransportError:
                return None

        try:
            eventually_sync(answer, until=lambda s: s == 200, timeout=90, message="serve ready")
            yield url
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                code = process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                raise
    assert code == 0, log.read_text()[-3000:]


@contextlib.contextmanager
def serve(env: dict[str, str], log_file: Path, *components: str) -> Iterator[str]:
    """``auditrec serve [--only …]`` until the block ends; yields the API's base URL once it
    is ready (:func:`serving`)."""
    only = ["--only", ",".join(components)] if components else []
    with serving(env, log_file, *only) as url:
        yield url
