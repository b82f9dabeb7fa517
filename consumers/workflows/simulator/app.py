"""The Workflows simulator's HTTP side: a Starlette app that routes the Workflows REST API, the
Queues API of its HTTP pull consumers, the ``/_sim`` control API and the webhook receivers'
deliveries (see :mod:`.server`) to a :class:`Simulator`, with the Cloudflare response envelope,
error codes and injected faults. With a token, all but the deliveries need it: the APIs answer
403 without it as Cloudflare does, the control API 401; a delivery is authenticated by its
signature.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import re
from collections import Counter
from typing import Any
from urllib.parse import unquote

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from consumers.workflows.simulator.bodies import (
    AckBody,
    ConfigBody,
    FaultBody,
    InjectBody,
    InstanceBody,
    PullBody,
    QueueBody,
    QueueFaultsBody,
    SendBatchBody,
    SendBody,
    WebhookBody,
    WebhookFaultsBody,
)
from consumers.workflows.simulator.eventqueues import PullRefused, QueueNotFound
from consumers.workflows.simulator.listing import ListingQuery, page_of
from consumers.workflows.simulator.receivers import ReceiverNotFound
from consumers.workflows.simulator.state import (
    LISTING,
    AlreadyFinished,
    Fault,
    Instance,
    Simulator,
    iso,
)

__all__ = ["API_PREFIX", "build_app"]

API_PREFIX = "/client/v4"

_INTERNAL = (10001, "workflows.api.error.internal_server")
_NOT_FOUND_INSTANCE = (10400, "workflows.api.error.instance.not_found")
_NOT_FOUND_WORKFLOW = (10200, "workflows.api.error.workflow.not_found")
# A terminate of an instance that has ended: 409 (the code is the simulator's choice).
_ALREADY_FINISHED = (10409, "workflows.api.error.instance.already_finished")
_AUTH = (10000, "Authentication error")
_RATE = (10100, "More than 1200 requests per 300 seconds reached. Please wait and consider "
         "throttling your request speed")  # fmt: skip
_API_ROUTE = re.compile(
    r"^/accounts/(?P<account>[^/]+)/workflows/(?P<workflow>[^/]+)"
    r"(?:(?P<list>/instances)(?:/(?P<instance>[^/]+)(?P<status>/status)?)?)?/?$"
)
_QUEUE_ROUTE = re.compile(
    r"^/accounts/(?P<account>[^/]+)/queues/(?P<queue>[^/]+)"
    r"(?P<action>/messages(?:/pull|/ack|/batch)?)?/?$"
)
# The Queues API's errors (developers.cloudflare.com/queues/reference/error-codes); the codes of
# an overloaded queue and of an internal error are the simulator's choice.
_QUEUE_NOT_FOUND = (10104, "Queue does not exist")
_QUEUE_BAD_BODY = 10207  # JSONRequestBodyInvalid: the body does not match the expected schema
_QUEUE_OVERLOADED = (10250, "Queue is overloaded")
_QUEUE_INTERNAL = (15000, "Internal error")
_SIM_QUEUE = re.compile(r"^/_sim/queues/(?P<queue>[^/]+)(?P<sub>/faults|/messages)?$")
_SIM_INSTANCE = re.compile(r"^/_sim/workflows/(?P<workflow>[^/]+)/instances/(?P<instance>[^/]+)$")
_SIM_WORKFLOW = re.compile(r"^/_sim/workflows/(?P<workflow>[^/]+)$")
_SIM_FAULT = re.compile(r"^/_sim/faults/(?P<instance>[^/]+)$")
_SIM_WEBHOOK = re.compile(r"^/_sim/webhooks/(?P<name>[^/]+)(?P<sub>/faults)?$")


def build_app(sim: Simulator) -> Starlette:
    async def dispatch(request: Request) -> Response:
        # The raw path keeps %2F inside an id; Starlette's decoded path would split it.
        raw = request.scope.get("raw_path") or request.scope["path"].encode()
        path = raw.decode("latin-1").split("?", 1)[0]
        if path.startswith(API_PREFIX + "/"):
            path = path[len(API_PREFIX) :]
        if request.method == "POST" and (m := _SIM_WEBHOOK.match(path)) and not m["sub"]:
            return await _deliver(sim, request, unquote(m["name"]))  # signed, not token-guarded
        if request.method in ("PUT", "PATCH", "POST"):
            data = await request.body()
            try:
                request.state.json = json.loads(data) if data else {}
            except ValueError:
                return _error(400, 10002, "body is not valid JSON")
            if not isinstance(request.state.json, dict):
                return _error(400, 10002, "body must be a JSON object")
        if path.startswith("/_sim/"):
            if not _authorized(sim, request):
                return JSONResponse(
                    {"error": "the control API needs the simulator's token: "
                     "Authorization: Bearer <--token>"},
                    401,
                    headers={"WWW-Authenticate": "Bearer"},
                )  # fmt: skip
            return await _control(sim, request, path)
        if m := _API_ROUTE.match(path):
            return await _api(sim, request, m)
        if m := _QUEUE_ROUTE.match(path):
            return await _queue_api(sim, request, m)
        return _no_route()

    methods = ["GET", "PUT", "PATCH", "POST", "DELETE"]
    return Starlette(routes=[Route("/{rest:path}", dispatch, methods=methods)])


# --- the Workflows API ------------------------------------------------------------------------


async def _api(sim: Simulator, request: Request, m: re.Match[str]) -> Response:
    instance = unquote(m["instance"]) if m["instance"] else None
    listing = m["list"] is not None and instance is None
    fault, delay = sim.arrive(LISTING if listing else instance)
    try:
        if delay > 0 and await _client_left_within(request, delay):
            return Response(status_code=499)  # nobody is listening any more
        if not _authorized(sim, request):
            return _error(403, *_AUTH)
        workflow = unquote(m["workflow"])
        if listing and not sim.listing:
            return _no_route()  # an API without the listing endpoint
        if fault is not None and fault.kind != "latency":
            return _fault_response(sim, fault, workflow, instance)
        response = _answer(
            sim, request, workflow, m["list"] is not None, instance, m["status"] is not None
        )
        if fault is not None and fault.headers:
            response.headers.update(fault.headers)
        return response
    finally:
        sim.leave()


def _fault_response(sim: Simulator, fault: Fault, workflow: str, instance: str | None) -> Response:
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
        result = sim.get_instance(instance, workflow=workflow) if instance else None
        return _error(200, *_INTERNAL, headers=headers, result=result)
    if fault.kind == "malformed":
        body = '{"success": true, "errors": [], "result": {"status": "runn'
        return Response(body, 200, headers, media_type="application/json")
    return Response(fault.body or "", fault.http_status or 200, headers,
                    media_type="application/json")  # fmt: skip


def _answer(
    sim: Simulator,
    request: Request,
    workflow: str,
    listing: bool,
    instance: str | None,
    status: bool,
) -> Response:
    method = request.method
    with sim.locked_workflows() as workflows:
        instances = workflows.get(workflow)
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
            return _ok(inst.result(simple=request.query_params.get("simple") == "true"))
        if not (method == "PATCH" and status):
            return _no_route()
    return _change_status(sim, workflow, inst, request)


def _change_status(sim: Simulator, workflow: str, inst: Instance, request: Request) -> Response:
    # Read synchronously from the cached body: the handler awaited it before routing.
    action = getattr(request.state, "json", {}).get("status")
    try:
        changed = sim.change_status(workflow, inst, action)
    except AlreadyFinished as ended:
        return _error(409, *_ALREADY_FINISHED, result={"status": str(ended)})
    if changed is None:
        return _error(400, 10021, "status must be pause, resume, terminate or restart")
    status, now = changed
    return _ok({"status": status, "timestamp": iso(now)})


def _list(instances: dict[str, Instance], workflow: str, request: Request) -> JSONResponse:
    """A page of the instance listing (``listing.py``)."""
    try:
        query = ListingQuery.parse(request.query_params)
    except ValueError as exc:
        return _error(400, 10021, str(exc))
    items, info = page_of(instances, workflow, query)
    return _ok(items, result_info=info)


# --- the Queues API (HTTP pull consumers) -----------------------------------------------------


async def _queue_api(sim: Simulator, request: Request, m: re.Match[str]) -> Response:
    _, delay = sim.arrive(None)  # counted, and slowed by the configured latency, like the rest
    try:
        if delay > 0 and await _client_left_within(request, delay):
            return Response(status_code=499)
        if not _authorized(sim, request):
            return _error(403, *_AUTH)
        queue, action = unquote(m["queue"]), m["action"]
        expected = "GET" if action is None else "POST"
        if request.method != expected:
            return _no_route()
        body = getattr(request.state, "json", {})
        try:
            if action is None:
                return _ok(sim.queues.describe(queue))
            if action.endswith("/ack"):
                ack = AckBody.model_validate(body)
                retries = [(r.lease_id, r.delay_seconds) for r in ack.retries]
                return _ok(sim.queues.ack(queue, [a.lease_id for a in ack.acks], retries))
            if action == "/messages":  # the producer API: one message
                one = SendBody.model_validate(body)
                sent = [(one.stored(), one.content_type, one.delay_seconds)]
                return _ok(sim.queues.send(queue, sent))
            if action.endswith("/batch"):
                batch = SendBatchBody.model_validate(body)
                sent = [
                    (m.stored(), m.content_type, m.delay_seconds or batch.delay_seconds)
                    for m in batch.messages
                ]
                return _ok(sim.queues.send(queue, sent))
            pull = PullBody.model_validate(body)
            result = sim.queues.pull(queue, pull.batch_size, pull.visibility_timeout_ms)
        except ValidationError as exc:
            return _error(400, _QUEUE_BAD_BODY, _first_problem(exc))
        except ValueError as exc:  # a body its content type cannot carry
            return _error(400, _QUEUE_BAD_BODY, str(exc))
        except QueueNotFound:
            return _error(404, *_QUEUE_NOT_FOUND)
        if isinstance(result, PullRefused):
            return _pull_refused(result)
        return _ok(result)
    finally:
        sim.leave()


def _pull_refused(refused: PullRefused) -> JSONResponse:
    headers = {}
    if refused.retry_after is not None:
        headers["retry-after"] = str(max(0, round(refused.retry_after)))
    if refused.http_status == 429:
        return _error(429, *_QUEUE_OVERLOADED, headers=headers)
    return _error(refused.http_status, *_QUEUE_INTERNAL, headers=headers)


def _first_problem(exc: ValidationError) -> str:
    """A validation error as one sentence naming the field, e.g. ``batch_size: Input should be
    less than or equal to 100``."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "body"
    return f"{where}: {first['msg']}"


def _queue_control(sim: Simulator, method: str, m: re.Match[str], body: Any) -> Response:
    queue, sub = unquote(m["queue"]), m["sub"]
    try:
        if sub is None and method == "PUT":
            return JSONResponse(sim.queues.put(queue, QueueBody.model_validate(body)))
        if sub is None and method == "GET":
            return JSONResponse(sim.queues.stats(queue))
        if sub is None and method == "DELETE":
            return Response(status_code=204 if sim.queues.delete(queue) else 404)
        if sub == "/faults" and method == "PUT":
            sim.queues.set_faults(queue, QueueFaultsBody.model_validate(body))
            return JSONResponse(sim.queues.stats(queue))
        if sub == "/messages" and method == "POST":
            item = InjectBody.model_validate(body)
            return JSONResponse({"id": sim.queues.inject(queue, item.body, item.content_type)})
    except QueueNotFound:
        return JSONResponse({"error": f"no queue {queue!r}"}, 404)
    return JSONResponse({"error": f"no route for {method} {m.group(0)}"}, 404)


# --- webhook receivers ------------------------------------------------------------------------


async def _deliver(sim: Simulator, request: Request, name: str) -> Response:
    """A delivery to a webhook receiver: recorded, then answered (after its delay)."""
    raw = await request.body()
    try:
        answer = sim.webhooks.deliver(name, raw, request.headers)
    except ReceiverNotFound:
        return JSONResponse({"error": f"no webhook receiver {name!r}"}, 404)
    if answer.delay > 0 and await _client_left_within(request, answer.delay):
        return Response(status_code=499)
    if answer.status == 401:
        return JSONResponse({"error": "signature refused"}, 401)
    return Response(status_code=answer.status)


def _webhook_control(sim: Simulator, method: str, m: re.Match[str], body: Any) -> Response:
    name, sub = unquote(m["name"]), m["sub"]
    try:
        if sub is None and method == "PUT":
            return JSONResponse(sim.webhooks.put(name, WebhookBody.model_validate(body)))
        if sub is None and method == "GET":
            return JSONResponse(sim.webhooks.get(name))
        if sub is None and method == "DELETE":
            return Response(status_code=204 if sim.webhooks.delete(name) else 404)
        if sub == "/faults" and method == "PUT":
            faults = WebhookFaultsBody.model_validate(body)
            return JSONResponse(sim.webhooks.set_faults(name, faults))
    except ReceiverNotFound:
        return JSONResponse({"error": f"no webhook receiver {name!r}"}, 404)
    return JSONResponse({"error": f"no route for {method} {m.group(0)}"}, 404)


# --- the control API --------------------------------------------------------------------------


async def _control(sim: Simulator, request: Request, path: str) -> Response:
    method, body = request.method, getattr(request.state, "json", None)
    try:
        if m := _SIM_QUEUE.match(path):
            return _queue_control(sim, method, m, body)
        if m := _SIM_WEBHOOK.match(path):
            return _webhook_control(sim, method, m, body)
        if m := _SIM_INSTANCE.match(path):
            wf, iid = unquote(m["workflow"]), unquote(m["instance"])
            if method == "PUT":
                item = InstanceBody.model_validate(body)
                return JSONResponse(sim.put_instance(wf, iid, item))
            if method == "DELETE":
                deleted = sim.delete_instance(iid, workflow=wf)
                return Response(status_code=204 if deleted else 404)
            if method == "GET" and (found := sim.instance_view(iid, workflow=wf)):
                return JSONResponse(found)
            if method == "GET":
                return JSONResponse({"error": "no such instance"}, 404)
        elif (m := _SIM_WORKFLOW.match(path)) and method == "PUT":
            sim.add_workflow(unquote(m["workflow"]))
            return JSONResponse({"workflow": unquote(m["workflow"])})
        elif m := _SIM_FAULT.match(path):
            if method == "PUT":
                f = FaultBody.model_validate(body)
                sim.set_fault(unquote(m["instance"]), f.kind, **f.model_dump(exclude={"kind"}))
                return JSONResponse({"fault": f.model_dump()})
            if method == "DELETE":
                sim.clear_fault(unquote(m["instance"]))
                return Response(status_code=204)
        elif path == "/_sim/config" and method in ("GET", "PUT"):
            if method == "PUT":
                config = ConfigBody.model_validate(body)
                sim.latency_ms = config.latency_ms
                if config.listing is not None:
                    sim.listing = config.listing
            return JSONResponse({"latency_ms": sim.latency_ms, "listing": sim.listing})
        elif path == "/_sim/stats" and method == "GET":
            return JSONResponse(sim.stats())
        elif path == "/_sim/reset" and method == "POST":
            sim.reset()
            return JSONResponse({"reset": True})
    except ValidationError as exc:
        return JSONResponse({"error": "invalid body", "detail": json.loads(exc.json())}, 422)
    return JSONResponse({"error": f"no route for {method} {path}"}, 404)


# --- HTTP plumbing ----------------------------------------------------------------------------


def _authorized(sim: Simulator, request: Request) -> bool:
    """Whether the request carries the simulator's bearer token (any request does when it has
    none)."""
    token = sim.token
    if token is None:
        return True
    given = request.headers.get("authorization", "").encode()
    return hmac.compare_digest(given, f"Bearer {token}".encode())


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
