"""The Workflows simulator's Cloudflare Queues: event-subscription messages and the HTTP pull
consumer, over real HTTP, and driven by the official ``cloudflare`` SDK."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from cloudflare import Cloudflare, NotFoundError

from consumers.workflows.queues import Acked, Pulled, QueueClient, QueueFailure, message_text
from consumers.workflows.simulator.server import STATUSES, Simulator, SimulatorServer
from tests.eventually import eventually_sync

ACC = "acc-1"
TOKEN = "queue-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
EVENTS = {
    "queued": "cf.workflows.workflow.instance.queued",
    "running": "cf.workflows.workflow.instance.started",
    "paused": "cf.workflows.workflow.instance.paused",
    "errored": "cf.workflows.workflow.instance.errored",
    "terminated": "cf.workflows.workflow.instance.terminated",
    "complete": "cf.workflows.workflow.instance.completed",
}
ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def server(simulator: SimulatorServer) -> SimulatorServer:
    simulator.sim.token = TOKEN
    return simulator


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5, headers=AUTH) as client:
        yield client


def queue_url(server: SimulatorServer, queue: str, action: str = "") -> str:
    return f"{server.url}/accounts/{ACC}/queues/{queue}{action}"


def pull(http: httpx.Client, server: SimulatorServer, queue: str = "q", **body: Any) -> Any:
    body.setdefault("visibility_timeout_ms", 200)
    r = http.post(queue_url(server, queue, "/messages/pull"), json=body)
    assert r.status_code == 200, r.text
    assert (r.json()["success"], r.json()["errors"]) == (True, [])
    return r.json()["result"]


def ack(
    http: httpx.Client,
    server: SimulatorServer,
    acks: list[str] = [],  # noqa: B006 - never mutated
    retries: list[tuple[str, float]] = [],  # noqa: B006
    queue: str = "q",
) -> Any:
    body = {"acks": [{"lease_id": a} for a in acks],
            "retries": [{"lease_id": r, "delay_seconds": d} for r, d in retries]}  # fmt: skip
    r = http.post(queue_url(server, queue, "/messages/ack"), json=body)
    assert r.status_code == 200, r.text
    return r.json()["result"]


def inject(server: SimulatorServer, *bodies: str, queue: str = "q") -> list[str]:
    return [server.sim.queues.inject(queue, b, "text") for b in bodies]


def pulled_again(http: httpx.Client, server: SimulatorServer, queue: str = "q") -> Any:
    """Pull until a message comes back (a lease lapsed or a delay ended)."""
    return eventually_sync(
        lambda: pull(http, server, queue)["messages"], timeout=5, message="a message to come back"
    )


# --- publishing --------------------------------------------------------------------------------


def test_a_status_change_publishes_the_event_subscription_message(
    server: SimulatorServer, http: httpx.Client
) -> None:
    server.sim.add_queue("q")
    sub_id = server.sim.queue_stats("q")["event_subscription_id"]
    before_ms = time.time() * 1000
    put = http.put(f"{server.root_url}/_sim/workflows/site-audit/instances/wf-1",
                   json={"status": "queued"})  # fmt: skip
    assert put.status_code == 200
    patch = http.patch(f"{server.url}/accounts/{ACC}/workflows/site-audit/instances/wf-1/status",
                       json={"status": "terminate"})  # fmt: skip
    changed_at = patch.json()["result"]["timestamp"]

    messages = pull(http, server)["messages"]

    assert [json.loads(m["body"])["type"] for m in messages] == [
        EVENTS["queued"], EVENTS["terminated"]
    ]  # fmt: skip
    last = messages[1]
    assert set(last) == {"id", "body", "attempts", "lease_id", "metadata", "timestamp_ms"}
    assert isinstance(last["body"], str)
    assert re.fullmatch(r"[0-9a-f]{32}", last["id"])
    assert last["attempts"] == 1
    assert last["metadata"] == {
        "CF-Content-Type": "json", "CF-sourceMessageSource": "workflows.workflow"
    }  # fmt: skip
    assert before_ms - 1 <= last["timestamp_ms"] <= time.time() * 1000 + 1
    assert json.loads(last["body"]) == {
        "type": "cf.workflows.workflow.instance.terminated",
        "source": {"type": "workflows.workflow", "workflowName": "site-audit"},
        "payload": {"versionId": "00000000-0000-4000-8000-000000000001", "instanceId": "wf-1"},
        "metadata": {"accountId": "0" * 32, "eventSubscriptionId": sub_id,
                     "eventSchemaVersion": 1, "eventTimestamp": changed_at},
    }  # fmt: skip
    assert ISO_MS.match(json.loads(messages[0]["body"])["metadata"]["eventTimestamp"])


@pytest.mark.parametrize("status", STATUSES)
def test_each_status_publishes_its_event_or_nothing(server: SimulatorServer, status: str) -> None:
    server.sim.add_queue("q")
    server.sim.set_instance("wf-1", status)
    published = [json.loads(m["body"])["type"] for m in server.sim.queue_stats("q")["messages"]]
    assert published == ([EVENTS[status]] if status in EVENTS else [])


def test_an_unchanged_status_publishes_nothing(server: SimulatorServer) -> None:
    server.sim.add_queue("q")
    server.sim.set_instance("wf-1", "running")
    server.sim.set_instance("wf-1", "running", output={"pages": 3})
    server.sim.set_instance("wf-1", "complete")
    types = [json.loads(m["body"])["type"] for m in server.sim.queue_stats("q")["messages"]]
    assert types == [EVENTS["running"], EVENTS["complete"]]


def test_a_subscription_takes_only_its_workflows_and_events(
    server: SimulatorServer, http: httpx.Client
) -> None:
    r = http.put(f"{server.root_url}/_sim/queues/q",
                 json={"workflows": ["billing"], "events": ["instance.errored"]})  # fmt: skip
    assert r.status_code == 200
    server.sim.set_instance("a", "errored")  # another workflow
    server.sim.set_instance("b", "running", workflow="billing")  # another event
    server.sim.set_instance("b", "errored", workflow="billing")
    bodies = [json.loads(m["body"]) for m in pull(http, server)["messages"]]
    assert [(b["source"]["workflowName"], b["payload"]["instanceId"]) for b in bodies] == [
        ("billing", "b")
    ]  # fmt: skip


def test_unknown_event_types_are_refused_by_name(
    server: SimulatorServer, http: httpx.Client
) -> None:
    r = http.put(f"{server.root_url}/_sim/queues/q", json={"events": ["instance.exploded"]})
    assert r.status_code == 422
    assert "cf.workflows.workflow.instance.exploded" in r.text


# --- pull, lease, ack, retry -------------------------------------------------------------------


def test_a_pulled_message_is_invisible_until_its_lease_lapses(
    server: SimulatorServer, http: httpx.Client
) -> None:
    server.sim.add_queue("q")
    inject(server, "one")
    first = pull(http, server, visibility_timeout_ms=200)["messages"]
    assert [(m["body"], m["attempts"]) for m in first] == [("one", 1)]
    assert pull(http, server)["messages"] == []  # leased: hidden from other pulls

    again = pulled_again(http, server)

    assert [(m["id"], m["attempts"]) for m in again] == [(first[0]["id"], 2)]
    assert again[0]["lease_id"] != first[0]["lease_id"]
    assert server.sim.queue_stats("q")["expired"] == 1


def test_visible_messages_are_pulled_oldest_first_in_batches(
    server: SimulatorServer, http: httpx.Client
) -> None:
    server.sim.add_queue("q")
    inject(server, *[f"m{i}" for i in range(12)])
    result = pull(http, server, batch_size=5)
    assert [m["body"] for m in result["messages"]] == ["m0", "m1", "m2", "m3", "m4"]
    assert result["message_backlog_count"] == 12
    metrics = result["metadata"]["metrics"]
    assert (metrics["backlog_count"], metrics["backlog_bytes"]) == (12, 2 * 10 + 3 * 2)
    assert metrics["oldest_message_timestamp_ms"] == min(
        m["timestamp_ms"] for m in result["messages"]
    )
    assert len(pull(http, server)["messages"]) == 7  # the default batch is 10


def test_an_acknowledged_message_is_gone(server: SimulatorServer, http: httpx.Client) -> None:
    server.sim.add_queue("q")
    inject(server, "a", "b")
    leases = [m["lease_id"] for m in pull(http, server)["messages"]]

    result = ack(http, server, acks=[leases[0]])

    assert result == {"ackCount": 1, "retryCount": 0, "warnings": {}}
    stats = server.sim.queue_stats("q")
    assert [m["body"] for m in stats["messages"]] == ["b"]
    assert (stats["acked"], stats["acks"]) == (1, 1)
    after = pull(http, server)
    assert after["message_backlog_count"] == 1
    assert after["metadata"]["metrics"]["backlog_bytes"] == len(b"b")


def test_a_retried_message_comes_back_after_its_delay(
    server: SimulatorServer, http: httpx.Client
) -> None:
    server.sim.add_queue("q")
    inject(server, "x")
    lease = pull(http, server, visibility_timeout_ms=60_000)["messages"][0]["lease_id"]

    assert ack(http, server, retries=[(lease, 0.3)])["retryCount"] == 1
    stats = server.sim.queue_stats("q")
    assert (stats["delayed"], stats["leased"], stats["retried"]) == (1, 0, 1)
    assert pull(http, server)["messages"] == []

    again = pulled_again(http, server)
    assert [(m["body"], m["attempts"]) for m in again] == [("x", 2)]


def test_an_expired_lease_is_not_acknowledged_and_named_in_warnings(
    server: SimulatorServer, http: httpx.Client
) -> None:
    server.sim.add_queue("q")
    inject(server, "late")
    lease = pull(http, server, visibility_timeout_ms=100)["messages"][0]["lease_id"]
    eventually_sync(lambda: server.sim.queue_stats("q")["visible"] == 1, timeout=5)

    result = ack(http, server, acks=[lease, "never-issued"])

    assert (result["ackCount"], set(result["warnings"])) == (0, {lease, "never-issued"})
    assert [m["body"] for m in server.sim.queue_stats("q")["messages"]] == ["late"]


def test_a_used_lease_cannot_be_used_twice(server: SimulatorServer, http: httpx.Client) -> None:
    server.sim.add_queue("q")
    inject(server, "once")
    lease = pull(http, server, visibility_timeout_ms=60_000)["messages"][0]["lease_id"]
    assert ack(http, server, retries=[(lease, 60)])["retryCount"] == 1

    result = ack(http, server, acks=[lease])

    assert (result["ackCount"], list(result["warnings"])) == (0, [lease])
    assert server.sim.queue_stats("q")["delayed"] == 1


@pytest.mark.parametrize("how", ["retry", "lapse"])
def test_a_message_past_max_retries_is_dead_lettered(
    server: SimulatorServer, http: httpx.Client, how: str
) -> None:
    server.sim.add_queue("q", max_retries=1)
    inject(server, "poison")
    for attempt in (1, 2):
        messages = eventually_sync(lambda: pull(http, server, visibility_timeout_ms=100)["messages"],
                                   timeout=5)  # fmt: skip
        assert messages[0]["attempts"] == attempt
        if how == "retry":
            ack(http, server, retries=[(messages[0]["lease_id"], 0)])

    stats = eventually_sync(lambda: server.sim.queue_stats("q"),
                            until=lambda s: s["dead_lettered"] == 1, timeout=5)  # fmt: skip
    assert stats["messages"] == []
    assert [(m["body"], m["attempts"]) for m in stats["dead_letters"]] == [("poison", 2)]
    assert pull(http, server)["message_backlog_count"] == 0


# --- faults ------------------------------------------------------------------------------------


def test_duplicate_enqueues_each_message_twice_with_two_ids(
    server: SimulatorServer, http: httpx.Client
) -> None:
    server.sim.add_queue("q", duplicate=1.0)
    server.sim.set_instance("wf-1", "errored")
    messages = pull(http, server)["messages"]
    assert len({m["id"] for m in messages}) == 2
    assert messages[0]["body"] == messages[1]["body"]
    stats = server.sim.queue_stats("q")
    assert (stats["published"], stats["duplicated"]) == (2, 1)


def test_drop_publishes_nothing(server: SimulatorServer, http: httpx.Client) -> None:
    server.sim.add_queue("q", drop=1.0)
    server.sim.set_instance("wf-1", "errored")
    assert pull(http, server)["messages"] == []
    assert (server.sim.queue_stats("q")["dropped"], server.sim.queue_stats("q")["published"]) == (
        1, 0
    )  # fmt: skip


def test_drop_and_duplicate_chances_are_reproducible_with_a_seed() -> None:
    def run() -> tuple[int, int]:
        sim = Simulator()
        sim.add_queue("q", drop=0.3, duplicate=0.3, seed=42)
        for i in range(40):
            sim.set_instance(f"wf-{i}", "errored")
        stats = sim.queue_stats("q")
        return stats["dropped"], stats["duplicated"]

    first = run()
    assert 0 < first[0] < 40 and 0 < first[1] < 40
    assert run() == first


def test_delay_makes_a_message_visible_later(server: SimulatorServer, http: httpx.Client) -> None:
    server.sim.add_queue("q", delay_ms=300)
    server.sim.set_instance("wf-1", "errored")
    assert pull(http, server)["messages"] == []
    assert server.sim.queue_stats("q")["delayed"] == 1
    assert len(pulled_again(http, server)) == 1


def test_reorder_pulls_visible_messages_in_random_order(
    server: SimulatorServer, http: httpx.Client
) -> None:
    server.sim.add_queue("q")
    inject(server, *[f"m{i:02}" for i in range(20)])
    faults = {"reorder": True, "seed": 3}
    assert http.put(f"{server.root_url}/_sim/queues/q/faults", json=faults).status_code == 200
    bodies = [m["body"] for m in pull(http, server, batch_size=20)["messages"]]
    assert sorted(bodies) == [f"m{i:02}" for i in range(20)]
    assert bodies != sorted(bodies)


@pytest.mark.parametrize("status", [429, 500, 502, 503])
def test_pull_errors_answer_the_next_pulls_in_the_cloudflare_envelope(
    server: SimulatorServer, http: httpx.Client, status: int
) -> None:
    server.sim.add_queue("q", pull_error={"http_status": status, "times": 2, "retry_after": 3})
    inject(server, "kept")
    url = queue_url(server, "q", "/messages/pull")
    for _ in range(2):
        r = http.post(url, json={})
        assert r.status_code == status
        assert r.headers["retry-after"] == "3"
        body = r.json()
        assert body["success"] is False
        assert body["errors"][0]["code"] == (10250 if status == 429 else 15000)
    assert [m["body"] for m in pull(http, server)["messages"]] == ["kept"]
    assert server.sim.queue_stats("q")["pull_errors"] == 2


def test_a_pull_error_without_times_lasts_until_cleared(
    server: SimulatorServer, http: httpx.Client
) -> None:
    server.sim.add_queue("q", pull_error={"http_status": 503})
    url = queue_url(server, "q", "/messages/pull")
    assert [http.post(url, json={}).status_code for _ in range(3)] == [503] * 3
    assert "retry-after" not in http.post(url, json={}).headers
    http.put(f"{server.root_url}/_sim/queues/q/faults", json={})
    assert http.post(url, json={}).status_code == 200


# --- bad requests ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [({"batch_size": 0}, "batch_size"), ({"batch_size": 101}, "batch_size"),
     ({"batch_size": "ten"}, "batch_size"), ({"visibility_timeout_ms": 0}, "visibility"),
     ({"visibility_timeout_ms": 43_200_001}, "visibility_timeout_ms")],
)  # fmt: skip
def test_a_bad_pull_body_is_a_400_naming_the_field(
    server: SimulatorServer, http: httpx.Client, body: dict[str, Any], field: str
) -> None:
    server.sim.add_queue("q")
    r = http.post(queue_url(server, "q", "/messages/pull"), json=body)
    assert r.status_code == 400
    error = r.json()["errors"][0]
    assert error["code"] == 10207 and field in error["message"]


def test_a_bad_ack_body_is_a_400(server: SimulatorServer, http: httpx.Client) -> None:
    server.sim.add_queue("q")
    r = http.post(queue_url(server, "q", "/messages/ack"), json={"acks": [{"lease": "x"}]})
    assert r.status_code == 400
    assert "acks.0.lease_id" in r.json()["errors"][0]["message"]


@pytest.mark.parametrize("action", ["/messages/pull", "/messages/ack", ""])
@pytest.mark.parametrize("prefix", ["/client/v4", ""])
def test_an_unknown_queue_is_cloudflares_404(
    server: SimulatorServer, http: httpx.Client, action: str, prefix: str
) -> None:
    url = f"{server.root_url}{prefix}/accounts/{ACC}/queues/nope{action}"
    r = http.request("GET" if not action else "POST", url, json=None if not action else {})
    assert r.status_code == 404
    assert r.json()["errors"] == [{"code": 10104, "message": "Queue does not exist"}]


@pytest.mark.parametrize("action", ["/messages/pull", "/messages/ack", ""])
def test_the_queue_api_needs_the_token(server: SimulatorServer, action: str) -> None:
    server.sim.add_queue("q")
    inject(server, "secret")
    method = "GET" if not action else "POST"
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        r = httpx.request(method, queue_url(server, "q", action), headers=headers,
                          json=None if not action else {})  # fmt: skip
        assert r.status_code == 403
        assert r.json()["errors"][0]["code"] == 10000
    assert server.sim.queue_stats("q")["pulls"] == 0
    assert httpx.get(f"{server.root_url}/_sim/queues/q").status_code == 401


# --- the control API and seeds -----------------------------------------------------------------


def test_the_control_api_creates_shows_injects_and_deletes_a_queue(
    server: SimulatorServer, http: httpx.Client
) -> None:
    base = f"{server.root_url}/_sim/queues/q"
    assert http.put(base, json={"max_retries": 0}).json()["published"] == 0
    injected = http.post(base + "/messages", json={"body": "{not json", "content_type": "text"})
    message_id = injected.json()["id"]
    pulled = pull(http, server)["messages"][0]
    assert (pulled["id"], pulled["body"], pulled["metadata"]["CF-Content-Type"]) == (
        message_id, "{not json", "text"
    )  # fmt: skip
    stats = http.get(base).json()
    assert {k: stats[k] for k in ("published", "leased", "pulls")} == {
        "published": 1, "leased": 1, "pulls": 1
    }  # fmt: skip
    assert stats["messages"][0]["state"] == "leased"
    assert http.delete(base).status_code == 204
    assert http.get(base).status_code == 404
    assert http.delete(base).status_code == 404
    assert http.post(base + "/messages", json={"body": "x"}).status_code == 404


def test_a_seed_creates_queues_and_a_reset_removes_them() -> None:
    sim = Simulator()
    sim.load_seed({"queues": [{"id": "q1"}, {"id": "q2", "events": ["instance.completed"],
                                             "faults": {"delay_ms": 5}}]})  # fmt: skip
    sim.set_instance("wf-1", "complete")
    assert (sim.queue_stats("q1")["published"], sim.queue_stats("q2")["published"]) == (1, 1)
    sim.reset()
    with pytest.raises(KeyError):
        sim.queue_stats("q1")


def test_simulate_workflows_serves_the_queues_it_is_given() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = ("from consumers.cli.main import main; import sys; "
            f"sys.argv = ['auditrec', 'simulate-workflows', '--port', '{port}', "
            "'--queue', 'q1', '--queue', 'q2']; main()")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"

        def listening() -> httpx.Response:
            try:
                return httpx.put(f"{base}/_sim/workflows/site-audit/instances/i",
                                 json={"status": "errored"})  # fmt: skip
            except httpx.ConnectError as exc:
                raise AssertionError(f"not listening yet: {exc}") from exc

        eventually_sync(listening, interval=0.05, message="the simulator to come up")
        for queue in ("q1", "q2"):
            r = httpx.post(f"{base}/client/v4/accounts/a/queues/{queue}/messages/pull", json={})
            types = [json.loads(m["body"])["type"] for m in r.json()["result"]["messages"]]
            assert types == [EVENTS["errored"]]
    finally:
        proc.terminate()
        proc.wait(timeout=5)


# --- the official cloudflare SDK ---------------------------------------------------------------


def test_the_official_cloudflare_sdk_pulls_acks_retries_and_reads_the_queue(
    server: SimulatorServer,
) -> None:
    server.sim.add_queue("q", max_retries=5)
    server.sim.set_instance("wf-1", "errored")
    inject(server, "second")
    client = Cloudflare(api_token=TOKEN, base_url=server.url, max_retries=0)

    pulled = client.queues.messages.pull("q", account_id=ACC, batch_size=2,
                                         visibility_timeout_ms=60_000)  # fmt: skip

    assert pulled is not None and pulled.messages is not None
    first, second = pulled.messages
    assert first.attempts == 1 and first.lease_id and first.id and first.timestamp_ms
    assert json.loads(first.body or "")["type"] == EVENTS["errored"]
    assert first.metadata == {"CF-Content-Type": "json",
                              "CF-sourceMessageSource": "workflows.workflow"}  # fmt: skip
    assert pulled.message_backlog_count == 2
    assert pulled.metadata is not None and pulled.metadata.metrics is not None
    assert pulled.metadata.metrics.backlog_count == 2

    acked = client.queues.messages.ack(
        "q", account_id=ACC, acks=[{"lease_id": first.lease_id or ""}],
        retries=[{"lease_id": second.lease_id or "", "delay_seconds": 0},
                 {"lease_id": "stale", "delay_seconds": 0}],
    )  # fmt: skip
    assert acked is not None
    assert (acked.ack_count, acked.retry_count) == (1, 1)
    assert acked.warnings is not None and set(acked.warnings) == {"stale"}

    queue = client.queues.get("q", account_id=ACC)
    assert queue is not None and queue.queue_id == "q" and queue.consumers
    consumer = queue.consumers[0]
    assert consumer.type == "http_pull" and consumer.consumer_id
    assert consumer.settings is not None and consumer.settings.max_retries == 5
    with pytest.raises(NotFoundError):
        client.queues.get("missing", account_id=ACC)


def test_a_queue_can_report_a_worker_consumer_instead_of_a_pull_consumer(
    server: SimulatorServer, http: httpx.Client
) -> None:
    put = http.put(f"{server.root_url}/_sim/queues/q", json={"consumer": "worker"})
    assert put.status_code == 200, put.text
    client = Cloudflare(api_token=TOKEN, base_url=server.url, max_retries=0)

    queue = client.queues.get("q", account_id=ACC)

    assert queue is not None and queue.consumers and len(queue.consumers) == 1
    consumer = queue.consumers[0]
    assert consumer.type == "worker" and consumer.script_name == "q-consumer"
    refused = http.put(f"{server.root_url}/_sim/queues/q", json={"consumer": "push"})
    assert refused.status_code == 422 and "consumer" in refused.text


# --- auditrec's own Queues client --------------------------------------------------------------


async def test_auditrecs_queue_client_reads_the_simulator(server: SimulatorServer) -> None:
    server.sim.add_queue("q", pull_error={"http_status": 429, "times": 1, "retry_after": 2})
    server.sim.set_instance("wf-1", "errored")
    queue = QueueClient(api_url=server.url, account_id=ACC, queue_id="q", api_token=TOKEN)
    missing = QueueClient(api_url=server.url, account_id=ACC, queue_id="nope", api_token=TOKEN)
    async with queue, missing:
        limited = await queue.pull(10, 60_000)
        assert isinstance(limited, QueueFailure)
        assert (limited.reason, limited.retry_after) == ("rate_limited", 2)

        pulled = await queue.pull(10, 60_000)
        assert isinstance(pulled, Pulled) and pulled.backlog == 1
        (message,) = pulled.messages
        assert json.loads(message_text(message))["payload"]["instanceId"] == "wf-1"

        acked = await queue.ack([message.lease_id])
        assert isinstance(acked, Acked) and (acked.acked, acked.retried) == (1, 0)
        assert server.sim.queue_stats("q")["messages"] == []

        described = await queue.describe()
        assert isinstance(described, dict) and described["queue_id"] == "q"
        gone = await missing.pull(1, 1_000)
        assert isinstance(gone, QueueFailure) and gone.reason == "not_found"


# --- the producer API (how an outcome reaches a product's Worker) ------------------------------


def test_the_official_cloudflare_sdk_sends_messages_one_and_in_batches(
    server: SimulatorServer,
) -> None:
    server.sim.add_queue("outcomes", workflows=[])  # a queue no subscription feeds
    client = Cloudflare(api_token=TOKEN, base_url=server.url, max_retries=0)
    entry = {"id": "out_1", "type": "audit.failed", "audit_id": "a-1", "status": "failed"}

    one = client.queues.messages.push("outcomes", account_id=ACC, body=entry, content_type="json")
    batch = client.queues.messages.bulk_push(
        "outcomes", account_id=ACC,
        messages=[{"body": {**entry, "id": "out_2"}, "content_type": "json"},
                  {"body": "plain words", "content_type": "text"},
                  {"body": {**entry, "id": "out_3"}, "content_type": "json", "delay_seconds": 60}],
    )  # fmt: skip

    assert one is not None and one.metadata is not None and one.metadata.metrics is not None
    assert one.metadata.metrics.backlog_count == 1
    assert batch is not None and batch.metadata is not None and batch.metadata.metrics is not None
    assert batch.metadata.metrics.backlog_count == 4
    pulled = client.queues.messages.pull("outcomes", account_id=ACC, batch_size=10)
    assert pulled is not None and pulled.messages is not None
    # in order; the delayed one not yet
    assert [m.body for m in pulled.messages] == [
        json.dumps(entry, separators=(",", ":")),
        json.dumps({**entry, "id": "out_2"}, separators=(",", ":")),
        "plain words",
    ]
    assert [m.metadata for m in pulled.messages][2] == {"CF-Content-Type": "text"}
    stats = server.sim.queue_stats("outcomes")
    assert (stats["sent"], stats["delayed"], stats["leased"]) == (4, 1, 3)


def test_a_bad_send_is_a_400_naming_the_field_and_sends_nothing(
    server: SimulatorServer, http: httpx.Client
) -> None:
    server.sim.add_queue("outcomes", workflows=[])
    cases = [
        (
            "/messages",
            {"body": 5, "content_type": "text"},
            "a text message's body must be a string",
        ),
        ("/messages", {"body": {}, "delay_seconds": -1}, "delay_seconds"),
        ("/messages/batch", {"messages": []}, "messages"),
        ("/messages/batch", {"messages": [{"body": 1}] * 101}, "messages"),
    ]
    for action, body, why in cases:
        answer = http.post(queue_url(server, "outcomes", action), json=body)
        assert answer.status_code == 400, (action, body)
        assert why in answer.json()["errors"][0]["message"]
    assert server.sim.queue_stats("outcomes")["sent"] == 0
    missing = http.post(queue_url(server, "nope", "/messages"), json={"body": {}})
    assert missing.status_code == 404 and missing.json()["errors"][0]["code"] == 10104


async def test_auditrecs_queue_client_sends_a_batch_in_order(server: SimulatorServer) -> None:
    server.sim.add_queue("outcomes", workflows=[])
    entries = [{"id": f"out_{i}", "type": "audit.failed", "audit_id": f"a-{i}"} for i in range(3)]
    queue = QueueClient(api_url=server.url, account_id=ACC, queue_id="outcomes", api_token=TOKEN)
    missing = QueueClient(api_url=server.url, account_id=ACC, queue_id="nope", api_token=TOKEN)
    stranger = QueueClient(api_url=server.url, account_id=ACC, queue_id="outcomes", api_token="x")
    async with queue, missing, stranger:
        assert await queue.send(entries) == 3
        gone = await missing.send(entries)
        refused = await stranger.send(entries)
        with pytest.raises(ValueError, match="1 to 100 messages, not 101"):
            await queue.send([{}] * 101)
        pulled = await queue.pull(10, 60_000)

    assert isinstance(gone, QueueFailure) and gone.reason == "not_found"
    assert isinstance(refused, QueueFailure) and refused.reason == "unauthorized"
    assert isinstance(pulled, Pulled)
    assert [json.loads(message_text(m)) for m in pulled.messages] == entries
    assert server.sim.queue_stats("outcomes")["sent"] == 3


def test_the_stats_tell_when_each_message_was_sent(
    server: SimulatorServer, http: httpx.Client
) -> None:
    server.sim.add_queue("outcomes", workflows=[])
    before = int(time.time() * 1000)
    first = http.post(queue_url(server, "outcomes", "/messages"), json={"body": {"n": 1}})
    time.sleep(0.02)  # on purpose: two sends apart in time
    second = http.post(queue_url(server, "outcomes", "/messages"), json={"body": {"n": 2}})
    after = int(time.time() * 1000)
    assert (first.status_code, second.status_code) == (200, 200)

    answer = http.get(f"{server.root_url}/_sim/queues/outcomes")
    assert answer.status_code == 200
    sent = [(json.loads(m["body"])["n"], m["timestamp_ms"]) for m in answer.json()["messages"]]
    assert [n for n, _ in sent] == [1, 2]
    assert before <= sent[0][1] < sent[1][1] <= after
    pulled = pull(http, server, "outcomes")["messages"]
    assert [m["timestamp_ms"] for m in pulled] == [at for _, at in sent]  # what a pull says
