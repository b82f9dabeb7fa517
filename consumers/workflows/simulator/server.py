"""A Cloudflare Workflows REST API simulator, served over real HTTP.

It speaks the shape of ``https://api.cloudflare.com/client/v4`` (every route is served both
under ``/client/v4`` and at the root) for what auditrec uses:

- ``GET /accounts/{acc}/workflows/{wf}``: the workflow, with instance counts per status
- ``GET …/workflows/{wf}/instances``: list (``status``, ``date_start``, ``date_end``,
  ``direction``, ``per_page`` up to 100, ``cursor`` from ``result_info.cursor``, or the
  deprecated ``page``), by creation time; ``listing: false`` in the config or the seed makes it
  answer 404 as an API without it would
- ``GET …/workflows/{wf}/instances/{id}``: one instance, in the usual envelope, with its
  ``steps`` (and ``step_count``); ``?simple=true`` leaves them out (``steps: []``)
- ``PATCH …/instances/{id}/status``: ``{"status": "pause"|"resume"|"terminate"|"restart"}``;
  a terminate of an instance that has ended (complete, errored, terminated) answers 409
  ``10409 workflows.api.error.instance.already_finished`` (the code is the simulator's
  choice) with ``result: {"status"}`` and changes nothing

Steps, in Cloudflare's shape: ``{"type": "step", "name", "start", "end", "success",
"attempts": [{"start", "end", "success", "error": {"name", "message"}|null}], "config",
"output"}`` (sleeps are ``{"type": "sleep", …}``). An instance's ``step`` ``{"name", "attempts":
1, "error": null, "started_at": its start}`` draws one step entry, one second per attempt:
with an ``error``, every attempt but the latest failed with it; the latest is still running
(no ``end``) while the instance is running, queued, paused or rolling back; when it is
``waiting`` the step succeeded and a ``sleep`` entry follows; when it has ended the step ended
with it (succeeded when complete, else its latest attempt failed too). So ``{"status":
"running", "step": {"name": "fetch", "attempts": 4, "error": {"name": "Error", "message":
"fetch failed"}}}`` is a step retrying after 3 failures. ``steps`` (a list) is given as is
instead, malformed or not. A restart clears both.

Unknown instance: 404 ``10400 workflows.api.error.instance.not_found``; unknown workflow: 404
``10200 workflows.api.error.workflow.not_found``; with a token configured, a wrong or missing
bearer token: 403 ``10000 Authentication error``. Routing uses the raw (still percent-encoded)
path, so an id is exactly one path segment and may contain ``/``, spaces and ``*``.

Cloudflare Queues fed by a Workflows event subscription, for an HTTP pull consumer
(:mod:`.eventqueues`): every status change of an instance of a subscribed workflow (a PUT that
creates it or changes its status, a status PATCH that changes it, every restart) publishes a
message whose ``body`` is the JSON string ``{"type": "cf.workflows.workflow.instance.<event>",
"source": {"type": "workflows.workflow", "workflowName"}, "payload": {"versionId",
"instanceId"}, "metadata": {"accountId", "eventSubscriptionId", "eventSchemaVersion": 1,
"eventTimestamp"}}`` (events: queued, started ← running, paused, errored, terminated,
completed ← complete; other statuses publish nothing), with ``metadata`` ``{"CF-Content-Type":
"json", "CF-sourceMessageSource": "workflows.workflow"}``:

- ``POST …/accounts/{acc}/queues/{q}/messages/pull`` ``{"batch_size": 1..100 (10),
  "visibility_timeout_ms": 1..43200000 (30000)}``: ``result: {"messages": [{"id", "body",
  "attempts", "lease_id", "metadata", "timestamp_ms"}], "message_backlog_count", "metadata":
  {"metrics": {"backlog_count", "backlog_bytes", "oldest_message_timestamp_ms"}}}``, at once;
  visible messages oldest first, each leased (hidden) for the visibility timeout with a new
  ``lease_id`` and ``attempts`` + 1, visible again when the lease lapses
- ``POST …/queues/{q}/messages/ack`` ``{"acks": [{"lease_id"}], "retries": [{"lease_id",
  "delay_seconds"}]}``: ``result: {"ackCount", "retryCount", "warnings": {lease_id: why}}``;
  only a current lease counts. A message delivered ``max_retries + 1`` times whose lease lapses
  or is retried is dead-lettered
- ``GET …/queues/{q}``: the queue, with its ``http_pull`` consumer (a ``worker`` consumer with
  ``"consumer": "worker"`` in the queue's config; only this answer changes: pulls still work)
- ``POST …/queues/{q}/messages`` ``{"body", "content_type": "json"|"text", "delay_seconds"}``
  and ``POST …/queues/{q}/messages/batch`` ``{"messages": [1..100 of those], "delay_seconds"}``:
  the producer API (what sends outcomes to a product's Worker), in order, all or none;
  ``result: {"metadata": {"metrics": …}}``. A ``json`` body is kept as its JSON text; such a
  message has no ``CF-sourceMessageSource``, and counts as ``sent`` in the stats

A bad pull, ack or send body: 400 ``10207`` naming the field; unknown queue: 404 ``10104 Queue does
not exist``; no token: 403 ``10000``. The configured latency delays these requests too, and
they count in the stats.

The control API (JSON; with a token configured it needs the same bearer token, else 401) lives
under ``/_sim``:
``PUT|GET|DELETE /_sim/workflows/{wf}/instances/{id}`` (``PUT`` ``{"status", "error",
"start", "end", "queued", "output", "params", "step", "steps"}``; ``GET`` shows the API result
with its steps, ``patches`` (the status PATCHes received, by action) and ``terminations``
(those that ended it); after ``DELETE`` the API answers 10400 and the listing leaves it out),
``PUT /_sim/workflows/{wf}``,
``PUT|DELETE /_sim/faults/{id}``, ``GET|PUT /_sim/config``, ``GET /_sim/stats`` (``total``,
``by_instance``, ``in_flight``, ``max_in_flight``, ``terminates``: the terminate PATCHes by
instance id),
``POST /_sim/reset``; for webhook receivers ``PUT|GET|DELETE /_sim/webhooks/{name}`` and
``PUT /_sim/webhooks/{name}/faults`` (below); and for queues ``PUT /_sim/queues/{q}``
``{"workflows": [..]|null, "events": [..]|null (short "instance.errored" or full names),
"max_retries": 3, "consumer": "http_pull"|"worker", "faults"}`` (create or replace, empty),
``GET`` (stats: ``published visible leased delayed acked retried expired dead_lettered
dropped duplicated pulls acks pull_errors``, ``messages`` and ``dead_letters``: ``[{"id",
"body", "attempts", "state", "timestamp_ms"}]``, ``timestamp_ms`` when it was published or
sent, wall clock), ``DELETE``,
``PUT /_sim/queues/{q}/faults``, ``POST /_sim/queues/{q}/messages`` ``{"body": "<string>",
"content_type": "json"|"text"|"bytes"}`` (inject any message). The same state has a Python
API (:class:`Simulator`, its ``queues``, ``add_queue`` and ``queue_stats``) for in-process
tests.

Webhook receivers, for the outcome feed's webhooks (:mod:`.receivers`): ``POST
/_sim/webhooks/{name}`` is a delivery (served at the root, and like every route under
``/client/v4`` too). It never needs the simulator's token: a sender authenticates by signature.
The raw body, its ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature`` are recorded
as they arrive; a receiver that is ``down`` or has ``fail`` answers left answers its ``status``;
else one with a secret checks the Standard Webhooks signature with the ``standardwebhooks``
package and answers 401 ``{"error": "signature refused"}`` to a bad one, a missing header or a
timestamp more than five minutes off (``refused``, recorded with ``verified: false``); else
204 (``accepted``). A ``delay`` is slept before answering. Unknown receiver: 404. Its control
routes (under ``/_sim``, so with a token they need it): ``PUT /_sim/webhooks/{name}``
``{"secret": "whsec_…"|null, "fail": 0, "status": 500, "down": false, "delay": 0}`` (create or
replace, empty; a secret that is no Standard Webhooks secret: 422), ``PUT
/_sim/webhooks/{name}/faults`` (the same without ``secret``: changes the faults, keeps what
was received), ``GET /_sim/webhooks/{name}`` (``deliveries``: ``[{"id", "timestamp",
"signature", "body" (the parsed JSON, or null), "raw", "verified", "status", "received_at"}]``,
oldest first; ``received``, ``accepted``, ``unique`` (distinct ids accepted), ``refused``,
``failed`` (fault answers), ``signed``, ``faults``, ``fail_left``), ``DELETE``. A reset removes
every receiver; a seed's ``webhooks`` (``[{"name", "secret", …faults}]``) create some. In Python:
:attr:`Simulator.webhooks`, :meth:`Simulator.add_webhook`.

Faults are per instance id and apply to its next ``times`` requests (``None``: forever):
``latency`` (delay, then the normal answer), ``rate_limit`` (429; ``retry-after`` and
``Ratelimit`` headers when ``retry_after`` is set), ``server_error`` (``http_status``, default
500), ``success_false`` (200 with ``success: false``), ``forbidden`` (403), ``malformed`` (200 with
a truncated JSON body), ``custom`` (``http_status``, raw ``body``, ``headers``), ``none``
(clears). ``latency_ms`` and ``headers`` apply to every kind. Faults set on the id
``@instances`` apply to the listing's requests.

Queue faults (``faults`` of a queue): ``duplicate`` (0..1, chance a published message is
enqueued twice, as two ids with one body), ``drop`` (0..1, chance a status change publishes
nothing), ``delay_ms`` (a message becomes visible that long after publishing), ``reorder``
(pulls take visible messages in random order), ``pull_error`` ``{"http_status": 429|500|502|503,
"times": n|null, "retry_after": s|null}`` (the next ``times`` pulls answer that error, 429 with
``10250 Queue is overloaded``, 5xx with ``15000 Internal error``; ``retry-after`` when set),
``seed`` (makes the chances reproducible).

:class:`SimulatorServer` runs it with uvicorn on a free loopback port in a background thread
(``with`` or ``async with``); :func:`run_simulator` serves it in the foreground for the CLI.
"""

from __future__ import annotations

import asyncio
import copy
import json
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

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
        # An idle connection is kept longer than any client keeps one (httpx: 5 s by default,
        # the Workflows client 30 s), so a client never sends on a connection the server is
        # closing at that moment (a read error on a request that was never read).
        config = uvicorn.Config(
            self.app, log_config=None, log_level="warning", access_log=False,
            lifespan="off", timeout_graceful_shutdown=1, timeout_keep_alive=65,
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


def run_simulator(
    host: str,
    port: int,
    token: str | None,
    seed: Path | None = None,
    queues: Sequence[str] = (),
    webhooks: Sequence[tuple[str, str | None]] = (),
) -> None:
    """Serve the simulator in the foreground until interrupted (``auditrec simulate-workflows``).

    ``seed`` is a JSON file in the format of :meth:`Simulator.load_seed`; ``queues`` are the ids
    of queues subscribed to every event of every workflow; ``webhooks`` are receivers to create,
    each a name and its secret (``None``: it checks no signature). Prints one start line, with
    every receiver's delivery URL (uvicorn's own is left out), then one line per request.
    """
    sim = Simulator(token=token)
    if seed is not None:
        sim.load_seed(json.loads(Path(seed).read_text(encoding="utf-8")))
    for queue_id in queues:
        sim.add_queue(queue_id)
    for name, secret in webhooks:
        sim.add_webhook(name, secret)
    root = f"http://{host}:{port}"
    receivers = "".join(
        f"; webhook {name} at {root}/_sim/webhooks/{quote(name, safe='')}"
        + (" (signed)" if secret else "")
        for name, secret in webhooks
    )
    print(
        f"Workflows API simulator: {root}{API_PREFIX} "
        f"(control API under /_sim; token {'required' if token else 'not required'}{receivers})",
        flush=True,
    )
    # The line above is the start line: uvicorn's own ("Uvicorn running on …") is left out;
    # its access log (one line per request) stays.
    logging_config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    logging_config["loggers"]["uvicorn.error"]["level"] = "WARNING"
    uvicorn.run(
        build_app(sim), host=host, port=port, lifespan="off", log_config=logging_config,
        log_level=None,
    )  # fmt: skip
