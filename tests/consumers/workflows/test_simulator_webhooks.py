"""The Workflows simulator's webhook receivers: deliveries of the outcome feed over real HTTP,
signed with the official ``standardwebhooks`` package, checked, answered with injected faults
and recorded."""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from standardwebhooks import Webhook

from consumers.components.outcomes import WebhookSender
from consumers.workflows.simulator.bodies import WebhookFaultsBody
from consumers.workflows.simulator.server import SimulatorServer
from tests.consumers.api.conftest import free_port
from tests.eventually import eventually_sync

SECRET = "whsec_" + base64.b64encode(b"a receiver's secret, 32 bytes ..").decode()
OTHER = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
TOKEN = "sim-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def entry(n: int = 1, audit: str = "a-1") -> dict[str, Any]:
    return {
        "id": f"out_{n:032x}", "type": "audit.failed", "audit_id": audit, "status": "failed",
        "error_code": "OOM", "rule": None, "reconciled_by": None, "actor": "workflow",
        "decided_at": "2026-12-06T10:00:00Z", "event_id": f"00000000-0000-4000-8000-{n:012x}",
    }  # fmt: skip


def signed(
    body: str, msg_id: str, secret: str = SECRET, at: datetime | None = None
) -> dict[str, str]:
    at = at or datetime.now(UTC)
    return {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, at, body),
    }


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5) as client:
        yield client


def hook_url(server: SimulatorServer, name: str = "r") -> str:
    return f"{server.root_url}/_sim/webhooks/{name}"


def deliver(
    http: httpx.Client, server: SimulatorServer, item: dict[str, Any], name: str = "r", **sign: Any
) -> httpx.Response:
    body = json.dumps(item)
    return http.post(hook_url(server, name), content=body, headers=signed(body, item["id"], **sign))


def received(http: httpx.Client, server: SimulatorServer, name: str = "r") -> Any:
    r = http.get(hook_url(server, name))
    assert r.status_code == 200, r.text
    return r.json()


def test_a_signed_delivery_is_accepted_and_recorded_as_sent(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    assert http.put(hook_url(simulator), json={"secret": SECRET}).status_code == 200
    item = entry()
    body = json.dumps(item)
    headers = signed(body, item["id"])

    r = http.post(hook_url(simulator), content=body, headers=headers)

    assert (r.status_code, r.content) == (204, b"")
    state = received(http, simulator)
    assert (state["received"], state["accepted"], state["unique"], state["refused"]) == (1, 1, 1, 0)
    (d,) = state["deliveries"]
    assert d["id"] == item["id"] and d["body"] == item and d["raw"] == body
    assert d["timestamp"] == headers["webhook-timestamp"]
    assert d["signature"] == headers["webhook-signature"] and d["signature"].startswith("v1,")
    assert (d["verified"], d["status"]) == (True, 204)
    received_at = datetime.fromisoformat(d["received_at"])
    assert abs(received_at - datetime.now(UTC)) < timedelta(seconds=5)


@pytest.mark.parametrize("wrong", ["tampered body", "another secret", "ten minutes old",
                                   "no signature"])  # fmt: skip
def test_a_delivery_not_signed_as_it_should_be_is_refused_with_401(
    simulator: SimulatorServer, http: httpx.Client, wrong: str
) -> None:
    http.put(hook_url(simulator), json={"secret": SECRET})
    item = entry()
    body = json.dumps(item)
    headers = signed(body, item["id"])
    if wrong == "tampered body":
        body = body.replace('"failed"', '"completed"')
    elif wrong == "another secret":
        headers = signed(body, item["id"], secret=OTHER)
    elif wrong == "ten minutes old":
        headers = signed(body, item["id"], at=datetime.now(UTC) - timedelta(minutes=10))
    else:
        del headers["webhook-signature"]

    r = http.post(hook_url(simulator), content=body, headers=headers)

    assert r.status_code == 401 and "signature" in r.json()["error"]
    state = received(http, simulator)
    assert (state["received"], state["accepted"], state["unique"], state["refused"]) == (1, 0, 0, 1)
    assert [(d["verified"], d["status"], d["raw"]) for d in state["deliveries"]] == [
        (False, 401, body)
    ]


def test_a_receiver_without_a_secret_accepts_anything_unverified(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    simulator.sim.add_webhook("open")
    r = http.post(hook_url(simulator, "open"), content=b"not json", headers={"webhook-id": "m1"})
    assert r.status_code == 204
    (d,) = received(http, simulator, "open")["deliveries"]
    assert (d["id"], d["body"], d["raw"], d["verified"]) == ("m1", None, "not json", False)


def test_fail_answers_the_next_deliveries_with_the_status_then_204(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    http.put(hook_url(simulator), json={"secret": SECRET, "fail": 2})
    item = entry()

    statuses = [deliver(http, simulator, item).status_code for _ in range(4)]

    assert statuses == [500, 500, 204, 204]
    state = received(http, simulator)
    assert (state["received"], state["failed"], state["accepted"], state["unique"]) == (4, 2, 2, 1)
    # a failed delivery still had a good signature: the receiver just could not take it
    assert [d["verified"] for d in state["deliveries"]] == [True] * 4


def test_down_answers_every_delivery_until_up_again_keeping_what_was_received(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    http.put(hook_url(simulator), json={"secret": SECRET, "down": True, "status": 503})
    down = [deliver(http, simulator, entry(n)).status_code for n in (1, 2, 3)]

    r = http.put(f"{hook_url(simulator)}/faults", json={"down": False})
    up = [deliver(http, simulator, entry(n)).status_code for n in (1, 2, 3)]

    assert r.status_code == 200 and r.json()["faults"]["down"] is False
    assert (down, up) == ([503] * 3, [204] * 3)
    state = received(http, simulator)
    assert (state["received"], state["failed"], state["accepted"], state["unique"]) == (6, 3, 3, 3)
    assert state["signed"] is True  # the faults changed, the secret stayed


def test_a_delay_makes_a_client_with_a_short_timeout_time_out(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    http.put(hook_url(simulator), json={"secret": SECRET, "delay": 2})
    item = entry()
    body = json.dumps(item)
    with httpx.Client(timeout=0.2) as impatient, pytest.raises(httpx.ReadTimeout):
        impatient.post(hook_url(simulator), content=body, headers=signed(body, item["id"]))
    # it was received (a receiver that is slow to answer may well have applied it)
    assert received(http, simulator)["received"] == 1
    http.put(f"{hook_url(simulator)}/faults", json={})
    assert deliver(http, simulator, item).status_code == 204


def test_a_repeated_id_counts_as_received_twice_and_unique_once(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    http.put(hook_url(simulator), json={"secret": SECRET})
    for item in (entry(1), entry(1), entry(2), entry(1)):
        assert deliver(http, simulator, item).status_code == 204
    state = received(http, simulator)
    assert (state["received"], state["accepted"], state["unique"]) == (4, 4, 2)
    assert [d["id"] for d in state["deliveries"]] == [entry(n)["id"] for n in (1, 1, 2, 1)]


def test_put_replaces_delete_removes_reset_clears_and_unknown_is_404(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    http.put(hook_url(simulator), json={"secret": SECRET})
    deliver(http, simulator, entry())
    assert http.put(hook_url(simulator), json={}).json()["received"] == 0  # replaced: empty
    http.put(hook_url(simulator, "other"), json={})

    assert http.delete(hook_url(simulator, "other")).status_code == 204
    assert http.delete(hook_url(simulator, "other")).status_code == 404
    assert http.post(f"{simulator.root_url}/_sim/reset").status_code == 200

    for name in ("r", "other"):
        assert deliver(http, simulator, entry(), name=name).status_code == 404
        assert http.get(hook_url(simulator, name)).status_code == 404
        assert http.put(f"{hook_url(simulator, name)}/faults", json={}).status_code == 404


@pytest.mark.parametrize("body", [{"secret": "whsec_"}, {"secret": "whsec_not base64!"},
                                  {"fail": -1}, {"status": 99}, {"delay": -1}, {"extra": 1}])  # fmt: skip
def test_a_bad_receiver_body_is_refused_naming_the_field(
    simulator: SimulatorServer, http: httpx.Client, body: dict[str, Any]
) -> None:
    r = http.put(hook_url(simulator), json=body)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"][-1] == next(iter(body))


def test_the_control_routes_need_the_token_and_the_delivery_route_does_not(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    simulator.sim.token = TOKEN
    url = hook_url(simulator)
    refused = [
        http.put(url, json={"secret": SECRET}),
        http.get(url),
        http.put(f"{url}/faults", json={"down": True}),
        http.delete(url),
    ]
    assert [r.status_code for r in refused] == [401] * 4
    assert http.put(url, json={"secret": SECRET}, headers=AUTH).status_code == 200

    assert deliver(http, simulator, entry()).status_code == 204  # no bearer token: its signature
    body = json.dumps(entry(2))  # under the API prefix too, like every route
    prefixed = f"{simulator.url}/_sim/webhooks/r"
    assert http.post(prefixed, content=body, headers=signed(body, "m2")).status_code == 204

    state = http.get(url, headers=AUTH).json()
    assert (state["accepted"], state["refused"]) == (2, 0)


def test_simulate_workflows_creates_the_receivers_it_is_given_and_says_where(
    http: httpx.Client,
) -> None:
    port = free_port()
    code = ("from consumers.cli.main import main; import sys; "
            f"sys.argv = ['auditrec', 'simulate-workflows', '--port', '{port}', "
            f"'--webhook', 'demo={SECRET}', '--webhook', 'open']; main()")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip
    root = f"http://127.0.0.1:{port}"
    try:

        def listening() -> httpx.Response:
            try:
                return http.get(f"{root}/_sim/webhooks/demo")
            except httpx.ConnectError as exc:
                raise AssertionError(f"not listening yet: {exc}") from exc

        assert eventually_sync(listening, interval=0.05).json()["signed"] is True
        item = entry()
        body = json.dumps(item)
        demo = http.post(f"{root}/_sim/webhooks/demo", content=body,
                         headers=signed(body, item["id"], secret=OTHER))  # fmt: skip
        assert demo.status_code == 401
        assert http.post(f"{root}/_sim/webhooks/open", content=body).status_code == 204
    finally:
        proc.terminate()
        out, errors = proc.communicate(timeout=5)
    start_lines = [line for line in out.decode().splitlines() if "simulator" in line]
    assert len(start_lines) == 1, out.decode() + errors.decode()
    assert f"webhook demo at {root}/_sim/webhooks/demo (signed)" in start_lines[0]
    assert f"webhook open at {root}/_sim/webhooks/open" in start_lines[0]
    assert "simulator" not in errors.decode()
    assert "running on" not in errors.decode().lower()  # uvicorn's start line is left out


def test_a_seed_creates_receivers_and_the_help_example_loads() -> None:
    from click.testing import CliRunner

    from consumers.cli.main import main
    from consumers.workflows.simulator.server import Simulator

    sim = Simulator()
    sim.load_seed({"webhooks": [{"name": "signed", "secret": SECRET, "down": True}]})
    seeded = sim.webhooks.get("signed")
    assert (seeded["signed"], seeded["faults"]["down"]) == (True, True)
    text = CliRunner().invoke(main, ["simulate-workflows", "--help"]).output
    sim.load_seed(json.loads(text.split("every key is optional:")[1].split("Statuses:")[0]))
    assert sim.webhooks.get("demo")["fail_left"] == 1
    with pytest.raises(ValueError, match="webhooks"):
        sim.load_seed({"webhooks": [{"name": "a/b"}]})


def test_simulate_workflows_refuses_a_bad_webhook_secret_naming_the_flag() -> None:
    from click.testing import CliRunner

    from consumers.cli.main import main

    result = CliRunner().invoke(main, ["simulate-workflows", "--webhook", "demo=whsec_"])
    assert result.exit_code == 2
    assert "--webhook" in result.output and "demo" in result.output


# --- auditrec's own sender ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    outcome_id: str
    body: str


async def test_auditrecs_webhook_sender_is_verified_failed_and_timed_out_by_a_receiver(
    simulator: SimulatorServer,
) -> None:
    simulator.sim.add_webhook("r", SECRET, fail=1)
    item = entry()
    sent = _Entry(item["id"], json.dumps(item))
    sender = WebhookSender(hook_url(simulator), SECRET, timeout=0.3)
    await sender.start()
    try:
        first = await sender.send([sent])
        second = await sender.send([sent])
        simulator.sim.webhooks.set_faults("r", WebhookFaultsBody(delay=2))
        slow = await sender.send([sent])
    finally:
        await sender.stop()

    assert (first, second) == (["HTTP 500"], [None])
    assert slow == ["no answer within 0.3s"]
    state = simulator.sim.webhooks.get("r")
    assert [(d["id"], d["verified"], d["body"]) for d in state["deliveries"]] == [
        (item["id"], True, item)
    ] * 3
    assert (state["received"], state["failed"], state["unique"]) == (3, 1, 1)
