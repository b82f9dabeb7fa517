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
def serve(env: dict[str, str], log_file: Path, *components: str) -> Iterator[str]:
    """``auditrec serve [--only …]`` until the block ends (SIGTERM, then it must exit 0);
    yields the API's base URL once it is ready."""
    port = free_port()
    only = ["--only", ",".join(components)] if components else []
    with log_file.open("w") as sink:
        process = subprocess.Popen(
            [AUDITREC, "serve", *only],
            env={**env, "AUDITREC_API_PORT": str(port)},
            stdout=sink,
            stderr=sink,
        )
        url = f"http://127.0.0.1:{port}"

        def ready() -> int | None:
            if process.poll() is not None:
                raise AssertionError(f"serve exited: {log_file.read_text()[-3000:]}")
            try:
                return httpx.get(f"{url}/readyz", timeout=2).status_code
            except httpx.TransportError:
                return None

        try:
            eventually_sync(ready, until=lambda s: s == 200, timeout=90, message="serve ready")
            yield url
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                code = process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                raise
    assert code == 0, log_file.read_text()[-3000:]
