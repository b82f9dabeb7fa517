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

from consumers.eventlog.codec import encode
from consumers.eventlog.port import OutRecord
from consumers.operations.publishing import complete_envelope
from consumers.workflows.simulator.server import SimulatorServer
from statemachine.events import EVENT_ADAPTER
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
VIEWER = "tok-view-0123456789"


@pytest.fixture
def live(backend: Backend, tmp_path: Path, simulator: SimulatorServer) -> Iterator[LiveServer]:
    settings = server_settings(
        tmp_path,
        simulator,
        event_log_url=backend.event_log_url,
        database_url=backend.database_url,
        topic_prefix=backend.topic_prefix,
        api_tokens=f"tools:{TOKEN}:operate,viewer:{VIEWER}:read",
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

    # then the projector and the reconciler both set it aside, and it is kept once
    letters: list[dict[str, Any]] = eventually_sync(
        lambda: client.get("/dead-letters").json()["dead_letters"],
        until=lambda found: len(found) >= 1,
        message="a dead letter",
    )
    origin = letters[0]["origin"]
    groups = [log.topics.group("projector"), log.topics.group("reconciler")]

    def moved_past() -> list[int]:
        return [
            live.call(lambda g=g: log.inspection.group_offsets(g, log.topics.lifecycle)).get(
                origin["partition"], 0
            )
            for g in groups
        ]

    eventually_sync(
        moved_past,
        until=lambda offsets: min(offsets) > origin["offset"],
        message="both groups past the record",
    )
    (letter,) = client.get("/dead-letters").json()["dead_letters"]
    assert letter["consumer"] in groups and letter["key"] == audit_id
    # each group's reason, the same words
    assert sorted((r["consumer"], r["reason"]) for r in letter["reasons"]) == [
        (group, letter["reason"]) for group in sorted(groups)
    ]
    one = client.get("/dead-letters", params={"consumer": letter["consumer"]}).json()
    assert one["dead_letters"] == [letter]
    for component in ("projector", "reconciler"):  # a component names its group
        by_name = client.get("/dead-letters", params={"consumer": component}).json()
        assert by_name["dead_letters"] == [letter], component
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
    again = client.post(f"/dead-letters/{position}/replay", content=json.dumps(body), headers=JSON)
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


def test_dead_letters_are_purged_by_an_operator_only_and_recorded(
    live: LiveServer, client: httpx.Client
) -> None:
    # given a dead letter
    audit_id = unique("a-purge")
    assert live.backends is not None
    log = live.backends.log
    live.call(lambda: log.append([OutRecord(log.topics.lifecycle, audit_id, b"\xffnot json")]))
    eventually_sync(
        lambda: client.get("/dead-letters").json()["dead_letters"],
        until=lambda found: any(item["key"] == audit_id for item in found),
        message="a dead letter",
    )
    purge = "/dead-letters/purge"

    # a reader may not purge; a duration out of range or not one is a 422 naming it
    with live.client(VIEWER) as viewer:
        denied = viewer.post(purge, content=json.dumps({"older_than": "0s"}), headers=JSON)
        assert denied.status_code == 403
    for bad in ("36526d", "soon", "-1h"):
        refused = client.post(purge, content=json.dumps({"older_than": bad}), headers=JSON)
        assert refused.status_code == 422, refused.text
        assert "older_than" in refused.text
    assert client.post(purge, content="{}", headers=JSON).status_code == 422

    # a dry run (the default) counts and removes nothing
    dry = client.post(purge, content=json.dumps({"older_than": "0s"}), headers=JSON)
    assert dry.status_code == 200, dry.text
    assert dry.json()["dry_run"] is True and dry.json()["dead_letters"] >= 1
    assert client.get("/dead-letters").json()["dead_letters"]

    # dry_run=false removes what is older, says who did it, and counts it
    before = purged_total(client)
    body = json.dumps({"older_than": "0s", "dry_run": False})
    done = client.post(purge, content=body, headers=JSON)
    assert done.status_code == 200, done.text
    assert done.json()["dead_letters"] == dry.json()["dead_letters"]
    assert done.json()["actor"] == "token:tools" and done.json()["dry_run"] is False
    assert client.get("/dead-letters").json()["dead_letters"] == []
    assert purged_total(client) == before + done.json()["dead_letters"]


def purged_total(client: httpx.Client) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("auditrec_dead_letters_purged_total "):
            return float(line.split()[1])
    raise AssertionError("auditrec_dead_letters_purged_total is not exported")


def test_backtest_reports_what_a_shorter_grace_would_have_failed(
    live: LiveServer, client: httpx.Client
) -> None:
    t0 = datetime.now(UTC) - timedelta(hours=3)
    audits = {unique("a-7m"): 7, unique("a-12m"): 12}
    events, observations = [], []
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
        raw = envelope("WorkflowStatusObserved", audit_id, data, occurred_at=when)
        observations.append(EVENT_ADAPTER.validate_python(complete_envelope(raw)))
    publish(client, *events)
    # (observations are the probe's: written to the log as it does, never through POST /events)
    assert live.backends is not None
    log = live.backends.log
    live.call(lambda: log.append([encode(log.topics.lifecycle, e) for e in observations]))
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
