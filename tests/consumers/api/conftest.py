"""Real parts for the API and telemetry tests.

- :class:`LiveServer`: ``auditrec serve`` as it runs in production (a :class:`Backends` and a
  :class:`Service` with the ``api`` component and any others), on a free loopback port, in a
  background thread with its own event loop. Tests talk to it over real HTTP.
- :class:`CaptureServer`: a tiny PostHog: records what the PostHog SDK posts to ``/batch/``
  and answers 200, or 503 (``mode = "down"``), or nothing for a while (``mode = "hang"``).
- The Workflows simulator (``simulator`` / ``_simulator_server`` from ``tests/conftest.py``).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from consumers.api.server import ApiServer
from consumers.cli.assembly import Service
from consumers.operations.backends import Backends
from consumers.operations.publishing import complete_envelope
from consumers.runtime.names import PIPELINE
from consumers.runtime.settings import Settings, load_settings
from consumers.workflows.simulator.server import SimulatorServer
from statemachine.events import EVENT_ADAPTER, AuditEvent
from statemachine.upcasting import upcast
from tests.eventually import eventually, eventually_sync

T = TypeVar("T")

API_AND_PIPELINE = ["api", *PIPELINE]
JSON = {"content-type": "application/json"}  # every POST to the API, a bodiless one too


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LiveServer:
    """``auditrec serve --only <components>`` in a thread; ``url`` is its API."""

    def __init__(self, components: list[str], **settings: Any) -> None:
        self.components = components
        self.overrides = settings
        self.settings: Settings | None = None
        self.backends: Backends | None = None
        self.service: Service | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LiveServer:
        self.port = free_port()
        self.settings = load_settings(
            **{"api_host": "127.0.0.1", "api_port": self.port, **self.overrides}
        )
        self._ready.clear()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()
        if not self._ready.wait(20) or self._error is not None:
            raise RuntimeError(f"the server did not start: {self._error!r}")
        return self

    async def _main(self) -> None:
        assert self.settings is not None
        self.loop = asyncio.get_running_loop()
        try:
            async with (
                Backends(self.settings) as backends,
                Service(backends, self.components) as service,
            ):
                self.backends, self.service = backends, service
                task = asyncio.create_task(service.run(drain_timeout=5))
                await eventually(
                    lambda: task.done() or self._started(service),
                    message="the API to come up",
                )
                if task.done():
                    raise RuntimeError(f"the service ended before the API came up: {task!r}")
                self._ready.set()
                await task
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            raise

    def _started(self, service: Service) -> bool:
        api = service.components.get("api")
        return "api" not in self.components or (isinstance(api, ApiServer) and api.serving)

    def call(self, make: Callable[[], Awaitable[T]], timeout: float = 30) -> T:
        """Run a coroutine in the server's event loop (for what HTTP does not show)."""
        assert self.loop is not None

        async def run() -> T:
            return await make()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout)

    def wait_pipeline_live(self) -> None:
        assert self.backends is not None
        backends = self.backends
        eventually_sync(
            lambda: self.call(backends.live_components),
            until=lambda live: all(name in live for name in PIPELINE),
            interval=0.05,
            message=f"the pipeline ({', '.join(PIPELINE)}) to report live",
        )

    def component(self, name: str) -> Any:
        assert self.service is not None
        return self.service.components[name]

    def stop(self) -> None:
        if self.loop is not None and self.service is not None and self._thread is not None:
            self.loop.call_soon_threadsafe(self.service.stopping.set)
            self._thread.join(20)
        self.loop = self.service = self.backends = None
        self._thread = None

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def server_settings(tmp: Path, simulator: SimulatorServer, **extra: Any) -> dict[str, Any]:
    return {
        "event_log_url": f"sqlite:///{tmp}/events.db",
        "database_url": f"sqlite:///{tmp}/audits.db",
        "topic_prefix": f"t{uuid.uuid4().hex[:8]}",
        "cloudflare_api_url": simulator.url,
        "cloudflare_account_id": "acc-test",
        "on_demand_wait": "10s",
        "probe_timeout": "0.5s",
        "posthog_api_key": None,
        # Tests here refuse tokens by the dozen from one address; tests/security/ throttles.
        "api_auth_failures_per_minute": 100_000,
        **extra,
    }


# --- building events ------------------------------------------------------------------------


def envelope(
    kind: str, audit_id: str, data: dict[str, Any], *, at: datetime | None = None, **extra: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"type": kind, "audit_id": audit_id, "producer": "test", "data": data}
    if at is not None:
        body["occurred_at"] = at.isoformat()
    body.update(extra)
    return body


def started(
    audit_id: str,
    *,
    minutes_ago: float = 30,
    instance: str | None = None,
    attach: bool = True,
    **data: Any,
) -> dict[str, Any]:
    at = datetime.now(UTC) - timedelta(minutes=minutes_ago)
    payload: dict[str, Any] = {
        "project_id": f"proj-{audit_id}",
        "organization_id": "org-1",
        "started_by_user_id": "user-1",
        "start_url": "https://example.com/",
        "pages_total": 100,
        **data,
    }
    if attach:
        payload["workflow_instance_id"] = instance or f"wf-{audit_id}"
    return envelope("AuditStarted", audit_id, payload, at=at)


def as_written(raw: list[dict[str, Any]], producer: str = "test") -> list[AuditEvent]:
    """Events as auditrec's own components write them (observations, decisions): validated,
    but past no door, since no publisher may send them."""
    return [
        EVENT_ADAPTER.validate_python(upcast(complete_envelope(r, producer=producer))) for r in raw
    ]


def publish(client: httpx.Client, *events: dict[str, Any]) -> list[str]:
    response = client.post("/events", json=list(events))
    assert response.status_code == 202, response.text
    ids: list[str] = response.json()["event_ids"]
    return ids


def wait_for(
    client: httpx.Client,
    audit_id: str,
    check: Callable[[dict[str, Any]], bool] = lambda r: True,
    timeout: float = 10,
) -> dict[str, Any]:
    """The audit (not probed) once the projection shows it and ``check`` holds."""

    def row() -> dict[str, Any] | None:
        response = client.get(f"/audits/{audit_id}", params={"probe": "false"})
        return response.json() if response.status_code == 200 else None  # type: ignore[no-any-return]

    found = eventually_sync(
        row,
        until=lambda r: r is not None and check(r),
        timeout=timeout,
        interval=0.03,
        message=f"audit {audit_id} to be projected as expected",
    )
    assert found is not None
    return found


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# --- a tiny PostHog -------------------------------------------------------------------------


class CaptureServer:
    """Records the PostHog SDK's real requests. ``events`` are the events of the requests it
    answered 200 (delivered); ``attempts`` counts every request received."""

    def __init__(self) -> None:
        self.mode = "ok"  # ok | down | hang
        self.hang_seconds = 2.0
        self.events: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.attempts = 0
        self._lock = threading.Lock()
        capture = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                doc = json.loads(body)
                with capture._lock:
                    capture.attempts += 1
                    mode = capture.mode
                if mode == "hang":
                    time.sleep(capture.hang_seconds)  # on purpose: a PostHog that hangs
                    self._answer(503, {"detail": "hung"})
                    return
                if mode == "down":
                    self._answer(503, {"detail": "unavailable"})
                    return
                with capture._lock:
                    capture.requests.append({"path": self.path, "body": doc})
                    for event in doc.get("batch", []):
                        capture.events.append(
                            {**event, "api_key": doc.get("api_key"), "path": self.path}
                        )
                self._answer(200, {"status": 1})

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                try:
                    data = json.dumps(body).encode()
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up (a hang)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def start(self) -> CaptureServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def delivered(self, name: str = "site_audit:complete") -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self.events if e.get("event") == name]

    def wait_delivered(self, count: int, timeout: float = 15) -> list[dict[str, Any]]:
        return eventually_sync(
            self.delivered,
            until=lambda got: len(got) >= count,
            timeout=timeout,
            interval=0.05,
            message=f"{count} PostHog events to be delivered",
        )


@pytest.fixture
def capture() -> Iterator[CaptureServer]:
    server = CaptureServer().start()
    try:
        yield server
    finally:
        server.stop()
