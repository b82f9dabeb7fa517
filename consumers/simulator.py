"""A Cloudflare Workflows REST API simulator, served over real HTTP.

It speaks the shape of ``https://api.cloudflare.com/client/v4`` (every route is served both
under ``/client/v4`` and at the root) for what auditrec uses:

- ``GET /accounts/{acc}/workflows/{wf}``: the workflow, with instance counts per status
- ``GET …/workflows/{wf}/instances``: list (``status``, ``per_page``, ``page``, ``cursor``)
- ``GET …/workflows/{wf}/instances/{id}``: one instance, in the usual envelope
- ``PATCH …/instances/{id}/status``: ``{"status": "pause"|"resume"|"terminate"|"restart"}``

Unknown instance: 404 ``10400 workflows.api.error.instance.not_found``; unknown workflow: 404
``10200 workflows.api.error.workflow.not_found``; with a token configured, a wrong or missing
bearer token: 403 ``10000 Authentication error``. Routing uses the raw (still percent-encoded)
path, so an id is exactly one path segment and may contain ``/``, spaces and ``*``.

The control API (JSON, never behind the token) lives under ``/_sim``:
``PUT|GET|DELETE /_sim/workflows/{wf}/instances/{id}``, ``PUT /_sim/workflows/{wf}``,
``PUT|DELETE /_sim/faults/{id}``, ``GET|PUT /_sim/config``, ``GET /_sim/stats``,
``POST /_sim/reset``. The same state has a Python API (:class:`Simulator`) for in-process tests.

Faults are per instance id and apply to its next ``times`` requests (``None``: forever):
``latency`` (delay, then the normal answer), ``rate_limit`` (429; ``retry-after`` and
``Ratelimit`` headers when ``retry_after`` is set), ``server_error`` (``http_status``, default
500), ``success_false`` (200 with ``success: false``), ``forbidden`` (403), ``malformed`` (200 with
a truncated JSON body), ``custom`` (``http_status``, raw ``body``, ``headers``), ``none``
(clears). ``latency_ms`` and ``headers`` apply to every kind.

:class:`SimulatorServer` runs it with uvicorn on a free loopback port in a background thread
(``with`` or ``async with``); :func:`run_simulator` serves it in the foreground for the CLI.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal
from urllib.parse import unquote

import uvicorn
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

__all__ = [
    "API_PREFIX",
    "DEFAULT_WORKFLOW",
    "STATUSES",
    "Fault",
    "Simulator",
    "SimulatorServer",
    "run_simulator",
]

API_PREFIX = "/client/v4"
DEFAULT_WORKFLOW = "site-audit"
STATUSES = (
    "queued", "running", "paused", "errored", "terminated", "complete",
    "waiting", "waitingForPause", "rollingBack", "unknown",
)  # fmt: skip
TERMINAL = frozenset({"complete", "errored", "terminated"})
FaultKind = Literal[
    "latency", "rate_limit", "server_error", "success_false", "forbidden", "malformed",
    "custom", "none",
]  # fmt: skip
ErrorValue = dict[str, str | None] | str | None

_AUTO: Any = object()  # "not given": derive the timestamp from the status
_INTERNAL = (10001, "workflows.api.error.internal_server")
_NOT_FOUND_INSTANCE = (10400, "workflows.api.error.instance.not_found")
_NOT_FOUND_WORKFLOW = (10200, "workflows.api.error.workflow.not_found")
_AUTH = (10000, "Authentication error")
_RATE = (10100, "More than 1200 requests per 300 seconds reached. Please wait and consider "
         "throttling your request speed")  # fmt: skip
_API_ROUTE = re.compile(
    r"^/accounts/(?P<account>[^/]+)/workflows/(?P<workflow>[^/]+)"
    r"(?:(?P<list>/instances)(?:/(?P<instance>[^/]+)(?P<status>/status)?)?)?/?$"
)
_SIM_INSTANCE = re.compile(r"^/_sim/workflows/(?P<workflow>[^/]+)/instances/(?P<instance>[^/]+)$")
_SIM_WORKFLOW = re.compile(r"^/_sim/workflows/(?P<workflow>[^/]+)$")
_SIM_FAULT = re.compile(r"^/_sim/faults/(?P<instance>[^/]+)$")


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Fault:
    kind: FaultKind
    latency_ms: float = 0.0
    retry_after: float | None = None
    times: int | None = None
    http_status: int | None = None
    headers: dict[str, str] | None = None
    body: str | None = None


@dataclass(slots=True)
class _Instance:
    id: str
    status: str
    error: ErrorValue
    queued: datetime
    start: datetime | None
    end: datetime | None
    output: Any = None
    params: dict[str, Any] = field(default_factory=dict)
    modified: datetime = field(default_factory=_now)

    def result(self) -> dict[str, Any]:
        return {
            "status": self.status, "error": self.error, "output": self.output,
            "params": self.params, "queued": _iso(self.queued), "start": _iso(self.start),
            "end": _iso(self.end), "success": self.status == "complete" if self.end else None,
            "trigger": {"source": "api"}, "versionId": "00000000-0000-4000-8000-000000000001",
            "step_count": 0, "steps": [],
        }  # fmt: skip

    def summary(self, workflow: str) -> dict[str, Any]:
        return {
            "id": self.id, "status": self.status, "created_on": _iso(self.queued),
            "modified_on": _iso(self.modified), "started_on": _iso(self.start),
            "ended_on": _iso(self.end), "version_id": "00000000-0000-4000-8000-000000000001",
            "workflow_id": workflow,
        }  # fmt: skip


class Simulator:
    """In-memory state of the simulated account; thread-safe (the server runs in its own thread)."""

    def __init__(self, *, token: str | None = None, latency_ms: float = 0.0) -> None:
        self._lock = threading.Lock()
        self.token = token
        self.latency_ms = latency_ms
        self._workflows: dict[str, dict[str, _Instance]] = {DEFAULT_WORKFLOW: {}}
        self._faults: dict[str, Fault] = {}
        self._requests: Counter[str] = Counter()
        self._total = 0
        self._in_flight = 0
        self._max_in_flight = 0
        self.app = _build_app(self)

    # --- state -----------------------------------------------------------------------------

    def add_workflow(self, workflow: str) -> None:
        with self._lock:
            self._workflows.setdefault(workflow, {})

    def set_instance(
        self,
        instance_id: str,
        status: str = "running",
        *,
        workflow: str = DEFAULT_WORKFLOW,
        error: ErrorValue = None,
        start: datetime | None = _AUTO,
        end: datetime | None = _AUTO,
        queued: datetime | None = None,
        output: Any = None,
        params: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Create or replace an instance (creating the workflow too); returns its API result.

        ``start``/``end`` left out are derived: started unless queued, ended now if terminal.
        """
        if not instance_id or not status:
            raise ValueError("instance_id and status must be non-empty")
        now = _now()
        if start is _AUTO:
            start = None if status == "queued" else now
        if end is _AUTO:
            end = now if status in TERMINAL else None
        inst = _Instance(instance_id, status, error, queued or start or now, start, end, output,
                         dict(params or {}))  # fmt: skip
        with self._lock:
            self._workflows.setdefault(workflow, {})[instance_id] = inst
            return inst.result()

    def delete_instance(self, instance_id: str, *, workflow: str = DEFAULT_WORKFLOW) -> bool:
        with self._lock:
            return self._workflows.get(workflow, {}).pop(instance_id, None) is not None

    def get_instance(
        self, instance_id: str, *, workflow: str = DEFAULT_WORKFLOW
    ) -> dict[str, Any] | None:
        with self._lock:
            inst = self._workflows.get(workflow, {}).get(instance_id)
            return None if inst is None else inst.result()

    def set_fault(self, instance_id: str, kind: FaultKind, **options: Any) -> None:
        """Make the next ``times`` requests for ``instance_id`` misbehave (see module doc)."""
        with self._lock:
            if kind == "none":
                self._faults.pop(instance_id, None)
            else:
                self._faults[instance_id] = Fault(kind, **options)

    def clear_fault(self, instance_id: str) -> None:
        self.set_fault(instance_id, "none")

    def reset(self) -> None:
        """Back to a fresh simulator: one empty workflow, no faults, latency or token, no stats."""
        with self._lock:
            self._workflows = {DEFAULT_WORKFLOW: {}}
            self._faults.clear()
            self._requests.clear()
            self._total = 0
            self._max_in_flight = self._in_flight
            self.latency_ms = 0.0
            self.token = None

    def load_seed(self, seed: dict[str, Any]) -> None:
        """Apply a seed document: ``{workflows: [..], latency_ms, instances: [{workflow?, id,
        status, error?, start?, end?}], faults: [{id, kind, ...}]}``."""
        doc = _Seed.model_validate(seed)
        for name in doc.workflows:
            self.add_workflow(name)
        if doc.latency_ms is not None:
            self.latency_ms = doc.latency_ms
        for item in doc.instances:
            self._put_instance(item.workflow, item.id, item)
        for f in doc.faults:
            self.set_fault(f.id, f.kind, **f.model_dump(exclude={"id", "kind"}))

    # --- stats -----------------------------------------------------------------------------

    def requests_for(self, instance_id: str) -> int:
        """API requests received for one instance id (any method, counted on arrival)."""
        with self._lock:
            return self._requests[instance_id]

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "total": self._total, "by_instance": dict(self._requests),
                "in_flight": self._in_flight, "max_in_flight": self._max_in_flight,
            }  # fmt: skip

    # --- request handling (server thread) ---------------------------------------------------

    def _put_instance(self, workflow: str, instance_id: str, body: _InstanceBody) -> dict[str, Any]:
        given = body.model_fields_set
        return self.set_instance(
            instance_id, body.status, workflow=workflow, error=body.error,
            start=body.start if "start" in given else _AUTO,
            end=body.end if "end" in given else _AUTO,
            queued=body.queued, output=body.output, params=body.params,
        )  # fmt: skip

    def _arrive(self, instance_id: str | None) -> tuple[Fault | None, float]:
        with self._lock:
            self._total += 1
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
            fault = None
            if instance_id is not None:
                self._requests[instance_id] += 1
                fault = self._faults.get(instance_id)
                if fault is not None and fault.times is not None:
                    if fault.times <= 1:
                        del self._faults[instance_id]
                    else:
                        self._faults[instance_id] = replace(fault, times=fault.times - 1)
            delay = self.latency_ms + (fault.latency_ms if fault else 0.0)
            return fault, delay / 1000

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    async def _api(self, request: Request, m: re.Match[str]) -> Response:
        instance = unquote(m["instance"]) if m["instance"] else None
        fault, delay = self._arrive(instance)
        try:
            if delay > 0 and await _client_left_within(request, delay):
                return Response(status_code=499)  # nobody is listening any more
            if self.token is not None and request.headers.get("authorization") != (
                f"Bearer {self.token}"
            ):
                return _error(403, *_AUTH)
            workflow = unquote(m["workflow"])
            if fault is not None and fault.kind != "latency":
                return self._fault_response(fault, workflow, instance)
            response = self._answer(
                request, workflow, m["list"] is not None, instance, m["status"] is not None
            )
            if fault is not None and fault.headers:
                response.headers.update(fault.headers)
            return response
        finally:
            self._leave()

    def _fault_response(self, fault: Fault, workflow: str, instance: str | None) -> Response:
        headers = dict(fault.headers or {})
        if fault.kind == "rate_limit":
            if fault.retry_after is not None:
                seconds = max(0, round(fault.retry_after))
                headers.setdefault("retry-after", str(seconds))
                headers.setdefault("ratelimit", f'"default";r=0;t={seconds}')
                headers.setdefault("ratelimit-policy", '"default";q=1200;w=300')
            return _error(429, *_RATE, headers=headers)
        if fault.retry_after is not None:
            headers.setdefault("retry-after", f"{fault.retry_after:g}")
        if fault.kind == "server_error":
            return _error(fault.http_status or 500, *_INTERNAL, headers=headers)
        if fault.kind == "forbidden":
            return _error(fault.http_status or 403, *_AUTH, headers=headers)
        if fault.kind == "success_false":
            result = self.get_instance(instance, workflow=workflow) if instance else None
            return _error(200, *_INTERNAL, headers=headers, result=result)
        if fault.kind == "malformed":
            body = '{"success": true, "errors": [], "result": {"status": "runn'
            return Response(body, 200, headers, media_type="application/json")
        return Response(fault.body or "", fault.http_status or 200, headers,
                        media_type="application/json")  # fmt: skip

    def _answer(
        self, request: Request, workflow: str, listing: bool, instance: str | None, status: bool
    ) -> Response:
        method = request.method
        with self._lock:
            instances = self._workflows.get(workflow)
            if instances is None:
                return _error(404, *_NOT_FOUND_WORKFLOW)
            if instance is None:
                if listing:
                    return _list(instances, workflow, request) if method == "GET" else _no_route()
                if method != "GET":
                    return _no_route()
                counts = Counter(i.status for i in instances.values())
                return _ok({"id": workflow, "name": workflow, "class_name": "SiteAudit",
                            "script_name": workflow, "instances": dict(counts)})  # fmt: skip
            inst = instances.get(instance)
            if inst is None:
                return _error(404, *_NOT_FOUND_INSTANCE)
            if method == "GET" and not status:
                return _ok(inst.result())
            if not (method == "PATCH" and status):
                return _no_route()
        return self._change_status(inst, request)

    def _change_status(self, inst: _Instance, request: Request) -> Response:
        # Read synchronously from the cached body: the handler awaited it before routing.
        action = getattr(request.state, "json", {}).get("status")
        now = _now()
        with self._lock:
            if action == "pause":
                inst.status = "paused"
            elif action == "resume":
                inst.status = "running"
            elif action == "terminate":
                inst.status, inst.end = "terminated", now
            elif action == "restart":
                inst.status, inst.queued, inst.start, inst.end, inst.error = (
                    "running", now, now, None, None)  # fmt: skip
            else:
                return _error(400, 10021, "status must be pause, resume, terminate or restart")
            inst.modified = now
            return _ok({"status": inst.status, "timestamp": _iso(now)})

    async def _control(self, request: Request, path: str) -> Response:
        method, body = request.method, getattr(request.state, "json", None)
        try:
            if m := _SIM_INSTANCE.match(path):
                wf, iid = unquote(m["workflow"]), unquote(m["instance"])
                if method == "PUT":
                    item = _InstanceBody.model_validate(body)
                    return JSONResponse(self._put_instance(wf, iid, item))
                if method == "DELETE":
                    deleted = self.delete_instance(iid, workflow=wf)
                    return Response(status_code=204 if deleted else 404)
                if method == "GET" and (found := self.get_instance(iid, workflow=wf)):
                    return JSONResponse(found)
                if method == "GET":
                    return JSONResponse({"error": "no such instance"}, 404)
            elif (m := _SIM_WORKFLOW.match(path)) and method == "PUT":
                self.add_workflow(unquote(m["workflow"]))
                return JSONResponse({"workflow": unquote(m["workflow"])})
            elif m := _SIM_FAULT.match(path):
                if method == "PUT":
                    f = _FaultBody.model_validate(body)
                    self.set_fault(unquote(m["instance"]), f.kind, **f.model_dump(exclude={"kind"}))
                    return JSONResponse({"fault": f.model_dump()})
                if method == "DELETE":
                    self.clear_fault(unquote(m["instance"]))
                    return Response(status_code=204)
            elif path == "/_sim/config" and method in ("GET", "PUT"):
                if method == "PUT":
                    self.latency_ms = _ConfigBody.model_validate(body).latency_ms
                return JSONResponse({"latency_ms": self.latency_ms})
            elif path == "/_sim/stats" and method == "GET":
                return JSONResponse(self.stats())
            elif path == "/_sim/reset" and method == "POST":
                self.reset()
                return JSONResponse({"reset": True})
        except ValidationError as exc:
            return JSONResponse({"error": "invalid body", "detail": json.loads(exc.json())}, 422)
        return JSONResponse({"error": f"no route for {method} {path}"}, 404)


# --- HTTP plumbing ----------------------------------------------------------------------------


async def _client_left_within(request: Request, seconds: float) -> bool:
    """Sleep ``seconds``, ending early (True) if the client disconnects meanwhile, so a timed-out
    request does not linger in the in-flight count or hold up shutdown."""

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(disconnected())
    try:
        done, _ = await asyncio.wait({watcher}, timeout=seconds)
        return bool(done)
    finally:
        watcher.cancel()


def _ok(result: Any, **extra: Any) -> JSONResponse:
    return JSONResponse({"success": True, "errors": [], "messages": [], "result": result, **extra})


def _error(
    status: int, code: int, message: str, *, headers: dict[str, str] | None = None,
    result: Any = None,
) -> JSONResponse:  # fmt: skip
    body = {"success": False, "errors": [{"code": code, "message": message}], "messages": [],
            "result": result}  # fmt: skip
    return JSONResponse(body, status, headers)


def _no_route() -> JSONResponse:
    return _error(404, 7000, "No route for that URI")


def _list(instances: dict[str, _Instance], workflow: str, request: Request) -> JSONResponse:
    q = request.query_params
    wanted = q.get("status")
    rows = [i for i in instances.values() if wanted is None or i.status == wanted]
    try:
        per_page = max(1, min(int(q.get("per_page", 50)), 100))
        page_no = max(int(q.get("page", 1)), 1)
        offset = max(int(q["cursor"]), 0) if "cursor" in q else (page_no - 1) * per_page
    except ValueError:
        return _error(400, 10021, "per_page, page and cursor must be integers")
    page = rows[offset : offset + per_page]
    info: dict[str, Any] = {"page": offset // per_page + 1, "per_page": per_page,
                            "count": len(page), "total_count": len(rows)}  # fmt: skip
    if offset + per_page < len(rows):
        info["cursor"] = str(offset + per_page)
    return _ok([i.summary(workflow) for i in page], result_info=info)


def _build_app(sim: Simulator) -> Starlette:
    async def dispatch(request: Request) -> Response:
        # The raw path keeps %2F inside an id; Starlette's decoded path would split it.
        raw = request.scope.get("raw_path") or request.scope["path"].encode()
        path = raw.decode("latin-1").split("?", 1)[0]
        if path.startswith(API_PREFIX + "/"):
            path = path[len(API_PREFIX) :]
        if request.method in ("PUT", "PATCH", "POST"):
            data = await request.body()
            try:
                request.state.json = json.loads(data) if data else {}
            except ValueError:
                return _error(400, 10002, "body is not valid JSON")
            if not isinstance(request.state.json, dict):
                return _error(400, 10002, "body must be a JSON object")
        if path.startswith("/_sim/"):
            return await sim._control(request, path)
        if m := _API_ROUTE.match(path):
            return await sim._api(request, m)
        return _no_route()

    methods = ["GET", "PUT", "PATCH", "POST", "DELETE"]
    return Starlette(routes=[Route("/{rest:path}", dispatch, methods=methods)])


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _InstanceBody(_Body):
    status: str = Field(min_length=1, max_length=64)
    error: ErrorValue = None
    start: AwareDatetime | None = None
    end: AwareDatetime | None = None
    queued: AwareDatetime | None = None
    output: Any = None
    params: dict[str, Any] | None = None


class _SeedInstance(_InstanceBody):
    workflow: str = DEFAULT_WORKFLOW
    id: str = Field(min_length=1)


class _FaultBody(_Body):
    kind: FaultKind
    latency_ms: float = Field(default=0.0, ge=0)
    retry_after: float | None = Field(default=None, ge=0)
    times: int | None = Field(default=None, ge=1)
    http_status: int | None = Field(default=None, ge=100, le=599)
    headers: dict[str, str] | None = None
    body: str | None = None


class _SeedFault(_FaultBody):
    id: str = Field(min_length=1)


class _ConfigBody(_Body):
    latency_ms: float = Field(ge=0)


class _Seed(_Body):
    workflows: list[str] = []
    latency_ms: float | None = Field(default=None, ge=0)
    instances: list[_SeedInstance] = []
    faults: list[_SeedFault] = []


# --- running it -----------------------------------------------------------------------------


class SimulatorServer:
    """Serve a :class:`Simulator` on ``127.0.0.1`` and a free port from a background thread.

    ``url`` is the API base to give a client (``http://127.0.0.1:PORT/client/v4``);
    ``root_url`` has no prefix (the control API is at ``root_url + "/_sim/..."``).
    ``start()``/``stop()`` are idempotent and each take well under a second.
    """

    def __init__(self, simulator: Simulator | None = None, *, host: str = "127.0.0.1") -> None:
        self.sim = simulator or Simulator()
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
            self.sim.app, log_config=None, log_level="warning", access_log=False,
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
    uvicorn.run(sim.app, host=host, port=port, lifespan="off", log_level="info")
