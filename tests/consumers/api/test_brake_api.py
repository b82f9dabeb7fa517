"""The mass-failure brake end to end, over HTTP against a real ``serve`` on each backend pair:
a sweep that would fail too many audits holds them, ``/brake`` and ``/readyz`` say so, and a
release lets each held failure through once."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from consumers.workflows.simulator.server import SimulatorServer
from tests.conftest import Backend
from tests.consumers.api.conftest import (
    API_AND_PIPELINE,
    JSON,
    LiveServer,
    publish,
    server_settings,
    started,
    unique,
    wait_for,
)
from tests.eventually import eventually_sync


@pytest.fixture
def client(backend: Backend, tmp_path: Path, simulator: SimulatorServer) -> Iterator[httpx.Client]:
    settings = server_settings(
        tmp_path,
        simulator,
        event_log_url=backend.event_log_url,
        database_url=backend.database_url,
        topic_prefix=backend.topic_prefix,
        sweep_wait="30s",
    )
    with LiveServer(API_AND_PIPELINE, **settings) as server:
        server.wait_pipeline_live()
        with server.client() as http:
            yield http


def test_a_mass_failure_is_held_until_released_over_http(
    client: httpx.Client, simulator: SimulatorServer
) -> None:
    # given 24 running audits whose instances the API cannot find, and 4 alive ones
    lost = [unique("lost") for _ in range(24)]
    alive = [unique("alive") for _ in range(4)]
    for audit_id in alive:
        simulator.sim.set_instance(f"wf-{audit_id}", "running")
    publish(client, *(started(a) for a in lost + alive))
    for audit_id in lost + alive:
        wait_for(client, audit_id)

    # when a sweep probes them
    summary = client.post("/sweep", headers=JSON).json()

    # then it fails none of them: 24 failures are held, and the brake is engaged
    assert (summary["candidates"], summary["failed"], summary["held"]) == (28, {}, 24)
    assert summary["pending"] == 0  # held is an outcome: nothing left to wait for
    assert (summary["brake"]["engaged"], summary["brake"]["held"]) == (True, 24)
    brake = client.get("/brake").json()
    assert (brake["engaged"], brake["lost"], brake["observations"], brake["held"]) == (
        True,
        24,
        28,
        24,
    )
    assert {h["audit_id"] for h in brake["holds"]} == set(lost)
    # a sweep while they are held: known at once to be held, not awaited until SWEEP_WAIT
    began = time.monotonic()
    again = client.post("/sweep", headers=JSON).json()
    assert (again["held"], again["pending"], again["failed"]) == (24, 0, {})
    assert time.monotonic() - began < 15, again["elapsed_s"]
    ready = client.get("/readyz").json()
    assert any("mass-failure brake engaged" in w for w in ready["warnings"])
    assert all(wait_for(client, a)["status"] == "running" for a in lost)

    # when an operator looks first, then releases the holds
    preview = client.post("/brake/release", params={"dry_run": "true"}, headers=JSON).json()
    assert (preview["holds"], preview["dry_run"]) == (24, True)
    assert client.get("/brake").json()["engaged"] is True
    done = client.post(
        "/brake/release", params={"reason": "provider incident over"}, headers=JSON
    ).json()
    assert (done["holds"], done["was_engaged"]) == (24, True)

    # then each lost audit fails once, as the reconciler's decision, and the brake is off
    for audit_id in lost:
        row = wait_for(client, audit_id, lambda r: r["status"] == "failed", timeout=30)
        assert (row["error_code"], row["failed_by"], row["held_decision_id"]) == (
            "instance_lost",
            "reconciler",
            None,
        )
    history = client.get(f"/audits/{lost[0]}/events").json()
    types = Counter(step["type"] for step in history["events"])
    assert (types["AuditFailureHeld"], types["AuditFailureReleased"], types["AuditFailed"]) == (
        1,
        1,
        1,
    )
    after = eventually_sync(
        lambda: client.get("/brake").json(),
        until=lambda b: b["held"] == 0,
        message="no holds left",
    )
    assert after["engaged"] is False
    assert after["last_ended"]["how"] == "released" and after["last_ended"]["by"] == "anonymous"
    assert client.get("/readyz").json()["warnings"] == []
    assert all(wait_for(client, a)["status"] == "running" for a in alive)
