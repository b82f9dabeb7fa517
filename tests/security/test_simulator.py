"""The Workflows simulator started with ``--token`` answers its control API (``/_sim/*``) only to
a request with that token: without it nobody on the network can reset it, plant an instance's
status or read its counts. A real ``auditrec simulate-workflows`` process."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import httpx
import pytest

from tests.cli import AUDITREC
from tests.consumers.api.conftest import free_port
from tests.eventually import eventually_sync

TOKEN = "a-simulator-token-0123456789"


@pytest.fixture
def simulator_process(env: dict[str, str]) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [AUDITREC, "simulate-workflows", "--port", str(port), "--token", TOKEN],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    root = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            httpx.get(f"{root}/_sim/stats", timeout=1.0)
        except httpx.TransportError:
            return False
        return True

    try:
        eventually_sync(up, message="the simulator to listen", timeout=30)
        yield root
    finally:
        process.terminate()
        process.wait(10)


def test_the_control_api_refuses_a_request_without_the_token(simulator_process: str) -> None:
    root = simulator_process
    instance = f"{root}/_sim/workflows/site-audit/instances/wf-1"
    api = f"{root}/client/v4/accounts/acc/workflows/site-audit/instances/wf-1"
    good = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(timeout=10) as http:
        assert http.put(instance, json={"status": "running"}, headers=good).status_code == 200

        # when someone without the token tries to change, reset or read the simulator
        attempts = [
            http.put(instance, json={"status": "errored"}),
            http.put(instance, json={"status": "errored"}, headers={"Authorization": "Bearer x"}),
            http.put(f"{root}/_sim/faults/wf-1", json={"kind": "server_error"}),
            http.put(f"{root}/_sim/config", json={"latency_ms": 5000}),
            http.post(f"{root}/_sim/reset"),
            http.get(f"{root}/_sim/stats"),
            http.get(instance, headers={"Authorization": TOKEN}),  # not a bearer token
        ]

        # then every attempt is refused, saying what it needs, and nothing changed
        assert [r.status_code for r in attempts] == [401] * len(attempts)
        assert all("token" in r.json()["error"] for r in attempts)
        assert attempts[0].headers["www-authenticate"] == "Bearer"
        seen = http.get(api, headers=good).json()["result"]
        assert seen["status"] == "running"
        config = http.get(f"{root}/_sim/config", headers=good).json()
        assert config["latency_ms"] == 0
        # and a reset with the token keeps the token it was started with
        assert http.post(f"{root}/_sim/reset", headers=good).status_code == 200
        assert http.get(f"{root}/_sim/stats").status_code == 401
        assert http.get(api).status_code == 403
