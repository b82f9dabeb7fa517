"""A Cloudflare Workflows REST API simulator, served over real HTTP.

It speaks the shape of ``https://api.cloudflare.com/client/v4`` (every route is served both
under ``/client/v4`` and at the root) for what auditrec uses:

- ``GET /accounts/{acc}/workflows/{wf}``: the workflow, with instance counts per status
- ``GET …/workflows/{wf}/instances``: list (``status``, ``date_start``, ``date_end``,
  ``direction``, ``per_page`` up to 100, ``cursor`` from ``result_info.cursor``, or the
  deprecated ``page``), by creation time; ``listing: false`` in the config or the seed makes it
  answer 404 as an API without it would
- ``GET …/workflows/{wf}/instances/{id}``: one instance, in the usual envelope
- ``PATCH …/instances/{id}/status``: ``{"status": "pause"|"resume"|"terminate"|"restart"}``

Unknown instance: 404 ``10400 workflows.api.error.instance.not_found``; unknown workflow: 404
``10200 workflows.api.error.workflow.not_found``; with a token configured, a wrong or missing
bearer token: 403 ``10000 Authentication error``. Routing uses the raw (still percent-encoded)
path, so an id is exactly one path segment and may contain ``/``, spaces and ``*``.

The control API (JSON; with a token configured it needs the same bearer token, else 401) lives
under ``/_sim``:
``PUT|GET|DELETE /_sim/workflows/{wf}/instances/{id}``, ``PUT /_sim/workflows/{wf}``,
``PUT|DELETE /_sim/faults/{id}``, ``GET|PUT /_sim/config``, ``GET /_sim/stats``,
``POST /_sim/reset``. The same state has a Python API (:class:`Simulator`) for in-process tests.

Faults are per instance id and apply to its next ``times`` requests (``None``: forever):
``latency`` (delay, then the normal answer), ``rate_limit`` (429; ``retry-after`` and
``Ratelimit`` headers when ``retry_after`` is set), ``server_error`` (``http_status``, default
500), ``success_false`` (200 with ``success: false``), ``forbidden`` (403), ``malformed`` (200 with
a truncated JSON body), ``custom`` (``http_status``, raw ``body``, ``headers``), ``none``
(clears). ``latency_ms`` and ``headers`` apply to every kind. Faults set on the id
``@instances`` apply to the listing's requests.

:class:`SimulatorServer` runs it with uvicorn on a free loopback port in a background thread
(``with`` or ``async with``); :func:`run_simulator` serves it in the foreground for the CLI.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from pathlib import Path
from types import TracebackType

import uvicorn

from consumers.workflows.simulator.app import API_PREFIX, build_app
from consumers.workflows.simulator.bodies import DEFAULT_WORKFLOW
from consumers.workflows.simulator.state import STATUSES, Fault, Simulator

__all__ = [
    "API_PREFIX",
    "DEFAULT_WORKFLOW",
    "STATUSES",
    "Fault",
    "Simulator",
    "SimulatorServer",
    "run_simulator",
]


class SimulatorServer:
    """Serve a :class:`Simulator` on ``127.0.0.1`` and a free port from a background thread.

    ``url`` is the API base to give a client (``http://127.0.0.1:PORT/client/v4``);
    ``root_url`` has no prefix (the control API is at ``root_url + "/_sim/..."``).
    ``start()``/``stop()`` are idempotent and each take well under a second.
    """

    def __init__(self, simulator: Simulator | None = None, *, host: str = "127.0.0.1") -> None:
        self.sim = simulator or Simulator()
        self.app = build_app(self.sim)
        self.host = host
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return self.root_url + API_PREFIX

    def start(self) -> None:
        if self._thread is not None:
            return
        # proto=IPPROTO_TCP, or asyncio leaves Nagle on (40 ms per keep-alive request)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind((self.host, 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app, log_config=None, log_level="warning", access_log=False,
            lifespan="off", timeout_graceful_shutdown=1,
        )  # fmt: skip
        server = uvicorn.Server(config)
        thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="workflows-sim", daemon=True
        )
        thread.start()
        deadline = time.monotonic() + 5
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                server.should_exit = True
                sock.close()
                raise RuntimeError("the Workflows simulator did not start")
            time.sleep(0.005)
        self._server, self._thread = server, thread

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.should_exit = True
        thread.join(3)
        if thread.is_alive():
            server.force_exit = True
            thread.join(2)
        self._server = self._thread = None

    def __enter__(self) -> SimulatorServer:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> SimulatorServer:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)


def run_simulator(host: str, port: int, token: str | None, seed: Path | None = None) -> None:
    """Serve the simulator in the foreground until interrupted (``auditrec simulate-workflows``).

    ``seed`` is a JSON file in the format of :meth:`Simulator.load_seed`.
    """
    sim = Simulator(token=token)
    if seed is not None:
        sim.load_seed(json.loads(Path(seed).read_text(encoding="utf-8")))
    print(
        f"Workflows API simulator: http://{host}:{port}{API_PREFIX} "
        f"(control API under /_sim; token {'required' if token else 'not required'})",
        flush=True,
    )
    uvicorn.run(build_app(sim), host=host, port=port, lifespan="off", log_level="info")
