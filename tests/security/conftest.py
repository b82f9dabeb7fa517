"""What the attack tests share: an environment for a real ``auditrec`` process on the
embedded backends (nothing of this process's ``AUDITREC_*`` leaks in), an API served without
tokens on loopback, as a default ``serve`` runs, a real ``serve`` process (:func:`serving`;
the console's ``serve`` on both backend pairs and its headless Chromium ``browser``), and a web
site of another origin (:class:`OtherSite`)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from consumers.workflows.simulator.server import SimulatorServer
from tests.consumers.api.conftest import LiveServer, server_settings
from tests.consumers.api.ui.conftest import browser, console_env, serve  # noqa: F401
from tests.e2e.serving import serving as serve_process


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
    """``auditrec serve ARGS`` as a real process (:func:`tests.e2e.serving.serving`), ready
    once it answers ``GET /audits`` (with ``token``)."""
    with serve_process(env, log, *args, ready="/audits", token=token) as url:
        yield url


class OtherSite:
    """A second web server, of another origin than the API's: it serves the given pages
    (path → HTML) as an attacker's site would, from ``host`` on a port of its own."""

    def __init__(self, host: str, pages: dict[str, str]) -> None:
        self.pages = pages
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = site.pages.get(self.path.split("?", 1)[0])
                if body is None:
                    self.send_error(404)
                    return
                data = body.encode()
                self.send_response(200)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.url = f"http://{host}:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> OtherSite:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
