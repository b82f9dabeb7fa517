"""``/dead-letters`` and ``/backtest`` over HTTP against a real ``serve`` (api, projector,
reconciler) on each backend pair, behind the token like every other route."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from consumers.eventlog.port import OutRecord
from consumers.workflows.simulator.server import SimulatorServer
from tests.conftest import Backend
from tests.consumers.api.conftest import (
    JSON,
    LiveServer,
    envelope,
    publish,
    server_settings,
    unique,
    wait_for,
)
from tests.eventually import eventually_sync

TOKEN = "tok-tools-0123456789"


@pytest.fixture
def live(backend: Backend, tmp_path: Path, simulator: SimulatorServer) -> Iterator[LiveServer]:
    settings = server_settings(
        tmp_path,
        simulator,
        event_log_url=backend.event_log_url,
        database_url=backend.database_url,
        topic_prefix=backend.topic_prefix,
        api_tokens=TOKEN,
    )
    with LiveServer(["api", "projector", "reconciler"], **settings) as server:
        yield server


@pytest.fixture
def client(live: LiveServer) -> Iterator[httpx.Client]:
    with live.client(TOKEN) as http:
        yield http


def test_dead_letters_are_listed_shown_and_replayed_once(
    live: LiveServer, client: httpx.Client
) -> None:
    # given a record cut short, written to the lifecycle topic directly
    audit_id = unique("a-dl")
    assert live.backends is not None
    log = live.backends.log
    hostile = b'{"type": "AuditStarted", "audit_id": "' + audit_id.encode() + b'"'
    live.call(lambda: log.append([OutRecord(log.topics.lifecycle, audit_id, hostile)]))

    # then the projector and the reconciler set it aside
    letters: list[dict[str, Any]] = eventually_sync(
        lambda: client.get("/dead-letters").json()["dead_letters"],
        until=lambda found: len(found) == 2,
        message="two dead letters",
    )
    assert {item["consumer"] for item in letters} == {
        log.topics.group("projector"),
        log.topics.group("reconciler"),
    }
    one = client.get("/dead-letters", params={"consumer": log.topics.group("projector")}).json()
    (letter,) = one["dead_letters"]
    position = letter["position"]
    shown = client.get(f"/dead-letters/{position}").json()
    assert shown["original"] == {"encoding": "text", "value": hostile.decode()}
    assert shown["decodes"] is False

    # as it is: 422 with the reason
    refused = client.post(f"/dead-letters/{position}/replay", headers=JSON)
    assert refused.status_code == 422
    assert "still does not decode: not valid JSON" in refused.json()["message"]

    # corrected: published once, however often asked
    body = envelope(
        "AuditStarted",
        audit_id,
        {"project_id": "p-1", "workflow_instance_id": f"wf-{audit_id}"},
        at=datetime.now(UTC),
    )
    first = client.post(f"/dead-letters/{position}/replay", content=json.dumps(body), headers=JSON)
    assert first.status_code == 200, first.text
    assert first.json()["published"] is True
    other = next(i["position"] for i in letters if i["position"] != position)
    again = client.post(f"/dead-letters/{other}/replay", content=json.dumps(body), headers=JSON)
    assert again.status_code == 200 and again.json()["published"] is False
    assert again.json()["event_id"] == first.json()["event_id"]
    row = wait_for(client, audit_id)
    assert (row["status"], row["version"]) == ("running", 1)

    # unknown and malformed positions; and no token, no access
    assert client.get("/dead-letters/0:99999").status_code == 404
    assert client.get("/dead-letters/zero").status_code == 422
    assert client.get("/dead-letters", params={"limit": 0}).status_code == 422
    with live.client() as anonymous:
        assert anonymous.get("/dead-letters").status_code == 401
        assert anonymous.post(f"/dead-letters/{position}/replay", headers=JSON).status_code == 401


def test_backtest_reports_what_a_shorter_grace_would_have_failed(
    live: LiveServer, client: httpx.Client
) -> None:
    t0 = datetime.now(UTC) - timedelta(hours=3)
    audits = {unique("a-7m"): 7, unique("a-12m"): 12}
    events = []
    for audit_id, age in audits.items():
        instance = f"wf-{audit_id}"
        events.append(
            envelope(
                "AuditStarted",
                audit_id,
                {"project_id": "p", "workflow_instance_id": instance},
                at=t0,
            )
        )
        when = (t0 + timedelta(minutes=age)).isoformat()
        data = {
            "workflow_instance_id": instance,
            "status": "not_found",
            "trigger": "watchdog",
            "observed_at": when,
        }
        events.append(envelope("WorkflowStatusObserved", audit_id, data, occurred_at=when))
    publish(client, *events)
    late, past = audits
    wait_for(client, past, lambda r: r["status"] == "failed")
    wait_for(client, late, lambda r: r["last_observed_status"] == "not_found")

    same = client.get("/backtest")
    assert same.status_code == 200, same.text
    assert same.json()["differences"] == []
    tested = client.get("/backtest", params={"set": "INSTANCE_LOST_GRACE=5m"}).json()
    assert [(d["audit_id"], d["kind"]) for d in tested["differences"]] == [(late, "failed")]
    assert tested["summary"] == {"instance_lost": {"failed": 1}}
    since = client.get("/backtest", params={"set": "INSTANCE_LOST_GRACE=5m", "since": "1h"}).json()
    assert since["differences"] == [] and since["audits_judged"] == 0

    bad = client.get("/backtest", params={"set": "LOST=5m"})
    assert bad.status_code == 422 and "LOST: not a policy setting" in bad.json()["message"]
    assert client.get("/backtest", params={"since": "soon"}).status_code == 422
    with live.client() as anonymous:
        assert anonymous.get("/backtest").status_code == 401
