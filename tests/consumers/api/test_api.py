"""The HTTP API over real HTTP: ``auditrec serve`` (api + projector + reconciler + probe) against
the Workflows simulator."""

from __future__ import annotations

import base64
import re
import socket
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from consumers.operations.listing import AUDIT_STATUSES
from consumers.operations.service import Operations
from consumers.workflows.simulator.server import SimulatorServer
from tests.eventually import eventually_sync

from .conftest import (
    API_AND_PIPELINE,
    JSON,
    LiveServer,
    envelope,
    publish,
    server_settings,
    started,
    unique,
    wait_for,
)


@pytest.fixture(scope="module")
def live(
    tmp_path_factory: pytest.TempPathFactory, _simulator_server: SimulatorServer
) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("api")
    with LiveServer(API_AND_PIPELINE, **server_settings(tmp, _simulator_server)) as server:
        server.wait_pipeline_live()
        yield server


@pytest.fixture
def client(live: LiveServer) -> Iterator[httpx.Client]:
    with live.client() as c:
        yield c


def lifecycle_end(live: LiveServer) -> int:
    assert live.backends is not None
    backends = live.backends
    ends = live.call(lambda: backends.log.inspection.end_offsets(backends.topics.lifecycle))
    return sum(ends.values())


# --- GET /audits/{id}: on-demand reconciliation per workflow state and fault -----------------

ERRORED_OOM: dict[str, str | None] = {"name": "Error", "message": "Worker exceeded memory limit."}
NOW = object()
LONG_AGO = object()

# (simulated instance: status / None = does not exist, error, end, audit age in minutes,
#  attached) → (status, error_code, reconciliation result)
STATES: dict[str, tuple[Any, ...]] = {
    "errored_oom": ("errored", ERRORED_OOM, None, 30, True, "failed", "oom", "failed"),
    "errored_bare": ("errored", None, None, 30, True, "failed", "unknown", "failed"),
    "terminated": ("terminated", None, None, 30, True, "failed", "workflow_terminated", "failed"),
    "complete_long_ago": (
        "complete", None, LONG_AGO, 60, True, "failed", "finalize_lost", "failed",
    ),
    "complete_just_now": ("complete", None, NOW, 60, True, "running", None, "unchanged"),
    "not_found_old": (None, None, None, 30, True, "failed", "instance_lost", "failed"),
    "not_found_young": (None, None, None, 1, True, "running", None, "unchanged"),
    "never_attached_old": (None, None, None, 30, False, "failed", "instance_lost", "failed"),
    "never_attached_young": (None, None, None, 1, False, "running", None, "unchanged"),
    "running": ("running", None, None, 30, True, "running", None, "healthy"),
    "queued": ("queued", None, None, 30, True, "running", None, "healthy"),
    "paused": ("paused", None, None, 30, True, "running", None, "healthy"),
    "waiting": ("waiting", None, None, 30, True, "running", None, "healthy"),
    "waitingForPause": ("waitingForPause", None, None, 30, True, "running", None, "healthy"),
    "rollingBack": ("rollingBack", None, None, 30, True, "running", None, "healthy"),
    "unknown": ("unknown", None, None, 30, True, "running", None, "healthy"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(STATES))
def test_status_reconciles_each_workflow_state_in_the_same_response(
    case: str, live: LiveServer, client: httpx.Client, _simulator_server: SimulatorServer
) -> None:
    status, error, end, age, attach, want_status, want_code, want_result = STATES[case]
    audit_id = unique(case.replace("_", "-"))
    instance = f"wf-{audit_id}"
    sim = _simulator_server.sim
    if status is not None:
        ended = {NOW: datetime.now(UTC), LONG_AGO: datetime.now(UTC) - timedelta(minutes=30)}
        kwargs: dict[str, Any] = {"error": error}
        if end is not None:
            kwargs["end"] = ended[end]
        sim.set_instance(instance, status, **kwargs)
    publish(client, started(audit_id, minutes_ago=age, attach=attach))
    wait_for(client, audit_id)

    response = client.get(f"/audits/{audit_id}")

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == want_status
    assert body["error_code"] == want_code
    recon = body["reconciliation"]
    assert recon["result"] == want_result, recon
    assert recon["audit_id"] == audit_id
    if want_result == "failed":
        assert recon["error_code"] == want_code
        assert body["failed_by"] == "reconciler"
        assert body["reconciled_by"] == "on_demand"
    if attach:
        assert sim.requests_for(instance) == 1
        expected_seen = status if status is not None else "not_found"
        assert body["last_observed_status"] == expected_seen
    else:
        assert body["last_observed_status"] == "not_attached"


FAULTS: dict[str, tuple[dict[str, Any], str]] = {
    "server_error": ({"kind": "server_error"}, "server_error"),
    "forbidden": ({"kind": "forbidden"}, "unauthorized"),
    "malformed": ({"kind": "malformed"}, "invalid_response"),
    "success_false": ({"kind": "success_false"}, "server_error"),
    "timeout": ({"kind": "latency", "latency_ms": 1500}, "timeout"),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_probe_fault_never_fails_the_audit(
    fault: str, live: LiveServer, client: httpx.Client, _simulator_server: SimulatorServer
) -> None:
    options, reason = FAULTS[fault]
    audit_id = unique(f"fault-{fault}".replace("_", "-"))
    instance = f"wf-{audit_id}"
    sim = _simulator_server.sim
    sim.set_instance(instance, "errored", error=ERRORED_OOM)  # dead, but the API won't say
    sim.set_fault(instance, options.pop("kind"), **options)
    publish(client, started(audit_id))
    wait_for(client, audit_id)

    body = client.get(f"/audits/{audit_id}").json()

    assert body["status"] == "running"
    assert body["error_code"] is None
    assert body["reconciliation"]["result"] == "probe_error"
    assert body["reconciliation"]["probe_error"] == reason
    sim.clear_fault(instance)


def test_rate_limited_probe_reports_rate_limited(
    tmp_path: Path, simulator: SimulatorServer
) -> None:
    audit_id = unique("limited")
    simulator.sim.set_instance(f"wf-{audit_id}", "errored", error=ERRORED_OOM)
    simulator.sim.set_fault(f"wf-{audit_id}", "rate_limit", retry_after=30)
    with LiveServer(API_AND_PIPELINE, **server_settings(tmp_path, simulator)) as live:
        live.wait_pipeline_live()
        with live.client() as client:
            publish(client, started(audit_id))
            wait_for(client, audit_id)
            body = client.get(f"/audits/{audit_id}").json()
    assert body["status"] == "running"
    assert body["reconciliation"]["result"] == "probe_error"
    assert body["reconciliation"]["probe_error"] == "rate_limited"


def test_repeated_polls_do_not_reprobe_within_the_interval(
    live: LiveServer, client: httpx.Client, _simulator_server: SimulatorServer
) -> None:
    sim = _simulator_server.sim
    healthy, young = unique("healthy"), unique("young")
    sim.set_instance(f"wf-{healthy}", "running")
    publish(client, started(healthy), started(young, minutes_ago=1))
    wait_for(client, healthy)
    wait_for(client, young)

    first = client.get(f"/audits/{healthy}").json()
    second = client.get(f"/audits/{healthy}").json()
    assert first["reconciliation"]["result"] == "healthy"
    assert second["reconciliation"] is None
    assert "not probed" in second["note"]
    assert sim.requests_for(f"wf-{healthy}") == 1

    assert client.get(f"/audits/{young}").json()["reconciliation"]["result"] == "unchanged"
    again = client.get(f"/audits/{young}").json()
    assert again["status"] == "running" and again["reconciliation"] is None
    assert sim.requests_for(f"wf-{young}") == 1


def test_concurrent_polls_share_one_probe(
    live: LiveServer, _simulator_server: SimulatorServer
) -> None:
    sim = _simulator_server.sim
    audit_id = unique("concurrent")
    sim.set_instance(f"wf-{audit_id}", "errored", error=ERRORED_OOM)
    sim.set_fault(f"wf-{audit_id}", "latency", latency_ms=300)
    with live.client() as client:
        publish(client, started(audit_id))
        wait_for(client, audit_id)
    results: list[dict[str, Any]] = []

    def poll() -> None:
        with live.client() as c:
            results.append(c.get(f"/audits/{audit_id}").json())

    threads = [threading.Thread(target=poll) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert len(results) == 4
    assert "failed" in [r["status"] for r in results]
    assert sim.requests_for(f"wf-{audit_id}") == 1


def test_probe_false_answers_from_the_projection(
    client: httpx.Client, _simulator_server: SimulatorServer
) -> None:
    audit_id = unique("noprobe")
    _simulator_server.sim.set_instance(f"wf-{audit_id}", "errored", error=ERRORED_OOM)
    publish(client, started(audit_id))
    wait_for(client, audit_id)

    body = client.get(f"/audits/{audit_id}", params={"probe": "false"}).json()

    assert body["status"] == "running"
    assert body["reconciliation"] is None
    assert _simulator_server.sim.requests_for(f"wf-{audit_id}") == 0


def test_a_failure_the_workflow_reported_is_not_probed(
    client: httpx.Client, _simulator_server: SimulatorServer
) -> None:
    audit_id = unique("wf-failed")
    publish(
        client,
        started(audit_id),
        envelope(
            "AuditFailed",
            audit_id,
            {"error_code": "oom", "error_detail": "out of memory", "failed_by": "workflow"},
        ),
    )
    wait_for(client, audit_id, lambda r: r["status"] == "failed")
    body = client.get(f"/audits/{audit_id}").json()
    assert body["failed_by"] == "workflow"
    assert body["reconciliation"] is None
    assert _simulator_server.sim.requests_for(f"wf-{audit_id}") == 0


def test_the_status_row_has_the_design_columns(client: httpx.Client) -> None:
    audit_id = unique("columns")
    publish(client, started(audit_id, minutes_ago=1, current_phase="crawl"))
    body = wait_for(client, audit_id)
    # DESIGN §6's columns, with the mass-failure brake's hold (§9) after `overturned`.
    # `failed_at` (a failure's time; `completed_at` is a completion's alone) after `completed_at`;
    # the audit's workflow and a stall verdict's time (§10) after the hold.
    assert list(body)[:28] == [
        "audit_id", "project_id", "organization_id", "started_by_user_id", "start_url",
        "workflow_instance_id", "status", "current_phase", "pages_crawled", "pages_total",
        "started_at", "completed_at", "failed_at", "error_code", "error_detail", "failed_phase", "failed_by",
        "reconciled_by", "last_observed_status", "last_observed_at", "overturned",
        "held_decision_id", "held_at", "workflow", "stalled_at", "version", "last_event_id",
        "updated_at",
    ]  # fmt: skip
    # the stores' internal columns (the rules' bookkeeping) are never shown
    hidden = {"instance_ended_at", "progress_event_id", "termination_requested_at"}
    assert not hidden & set(body)
    assert (body["workflow"], body["stalled_at"]) == (None, None)  # the default workflow's
    assert body["held_decision_id"] is None
    assert body["project_id"] == f"proj-{audit_id}"
    assert body["current_phase"] == "crawl"
    assert body["started_at"].endswith("Z")


def test_unknown_audit_is_404_and_a_bad_id_is_422(client: httpx.Client) -> None:
    response = client.get("/audits/no-such-audit")
    assert response.status_code == 404
    assert "no-such-audit" in response.json()["detail"]
    assert client.get("/audits/no-such-audit/events").status_code == 404

    bad = client.get("/audits/bad%20id")
    assert bad.status_code == 422
    assert any("audit_id" in line for line in bad.json()["detail"])
    too_long = client.get("/audits/" + "a" * 129)
    assert too_long.status_code == 422


# --- history -----------------------------------------------------------------------------


def test_history_explains_each_event_like_replay(
    live: LiveServer, client: httpx.Client, _simulator_server: SimulatorServer
) -> None:
    audit_id = unique("history")
    _simulator_server.sim.set_instance(f"wf-{audit_id}", "errored", error=ERRORED_OOM)
    publish(
        client,
        started(audit_id),
        envelope("AuditProgressed", audit_id, {"current_phase": "crawl", "pages_crawled": 40}),
    )
    wait_for(client, audit_id, lambda r: r["version"] == 2)
    assert client.get(f"/audits/{audit_id}").json()["status"] == "failed"

    response = client.get(f"/audits/{audit_id}/events")

    assert response.status_code == 200
    body = response.json()
    assert body["audit_id"] == audit_id and body["status"] == "failed"
    steps = body["events"]
    assert [(s["type"], s["before"], s["after"]) for s in steps] == [
        ("AuditStarted", "none", "running"),
        ("AuditProgressed", "running", "running"),
        ("WorkflowStatusObserved", "running", "running"),
        ("AuditFailed", "running", "failed"),
    ]
    observed, failed = steps[2], steps[3]
    assert observed["rule"] == "errored" and "oom" in observed["reason"]
    assert observed["data"]["status"] == "errored"
    assert failed["causation_id"] == observed["event_id"]
    assert failed["data"]["error_code"] == "oom"
    assert failed["data"]["failed_phase"] == "crawl"
    assert all(s["position"]["offset"] >= 0 for s in steps)

    assert live.backends is not None
    ops = Operations(live.backends)
    replay = live.call(lambda: ops.replay(audit_id))
    assert [
        {k: s[k] for k in ("event_id", "type", "before", "after", "rule", "reason")} for s in steps
    ] == [
        {k: d[k] for k in ("event_id", "type", "before", "after", "rule", "reason")}
        for d in ops.explain_dicts(replay)
    ]


# --- listing -----------------------------------------------------------------------------


def test_list_paginates_newest_first_with_an_opaque_cursor(
    tmp_path: Path, simulator: SimulatorServer
) -> None:
    settings = server_settings(tmp_path, simulator)
    with LiveServer(["api", "projector"], **settings) as live, live.client() as client:
        ids = [f"page-{i}" for i in range(7)]
        publish(client, *[started(a, minutes_ago=10 * (i + 1)) for i, a in enumerate(ids)])
        publish(
            client,
            envelope("AuditCompleted", "page-2", {"pages_crawled": 100}),
            envelope("AuditCompleted", "page-5", {}),
        )
        wait_for(client, "page-5", lambda r: r["status"] == "completed")
        wait_for(client, "page-2", lambda r: r["status"] == "completed")

        seen: list[str] = []
        cursor = None
        pages = 0
        while True:
            params: dict[str, Any] = {"limit": 3}
            if cursor:
                params["cursor"] = cursor
            body = client.get("/audits", params=params).json()
            seen += [a["audit_id"] for a in body["audits"]]
            pages += 1
            cursor = body["next_cursor"]
            if cursor is None:
                break
        assert seen == ids  # page-0 started last: newest first
        assert pages == 3

        done = client.get("/audits", params={"status": "completed"}).json()
        assert [a["audit_id"] for a in done["audits"]] == ["page-2", "page-5"]
        assert done["next_cursor"] is None
        exact = client.get("/audits", params={"limit": 7}).json()
        assert len(exact["audits"]) == 7 and exact["next_cursor"] is None

        for bad in ("not-a-cursor", base64.urlsafe_b64encode(b'["x", 1]').decode(), "%%%"):
            response = client.get("/audits", params={"cursor": bad})
            assert response.status_code == 422
            assert any("cursor" in line for line in response.json()["detail"])
        assert client.get("/audits", params={"status": "bogus"}).status_code == 422
        old = client.get("/audits", params={"older_than": "55m"}).json()["audits"]
        assert [a["audit_id"] for a in old] == ["page-5", "page-6"]
        mine = client.get("/audits", params={"project_id": "proj-page-3"}).json()
        assert [a["audit_id"] for a in mine["audits"]] == ["page-3"]
        assert client.get("/audits", params={"project_id": "other"}).json()["audits"] == []
        assert client.get("/audits", params={"error_code": "oom"}).json()["audits"] == []
        assert client.get("/audits", params={"error_code": "bogus"}).status_code == 422
        assert client.get("/audits", params={"older_than": "soon"}).status_code == 422
        assert client.get("/audits", params={"limit": 0}).status_code == 422
        assert client.get("/audits", params={"limit": 1001}).status_code == 422


# --- POST /events ------------------------------------------------------------------------


def test_post_one_envelope_or_a_list(live: LiveServer, client: httpx.Client) -> None:
    a, b = unique("post"), unique("post")
    given = str(uuid.uuid4())
    one = client.post("/events", json={**started(a), "event_id": given})
    assert one.status_code == 202
    assert one.json() == {"accepted": 1, "event_ids": [given]}

    many = client.post(
        "/events",
        json=[
            started(b),
            envelope("AuditProgressed", b, {"pages_crawled": 5}),
            envelope("AuditCompleted", b, {"pages_crawled": 9}),
        ],
    )
    assert many.status_code == 202
    ids = many.json()["event_ids"]
    assert len(ids) == 3 and all(uuid.UUID(i) for i in ids)
    row = wait_for(client, b, lambda r: r["status"] == "completed")
    assert row["pages_crawled"] == 9 and row["last_event_id"] == ids[-1]


def test_invalid_items_are_all_named_and_nothing_is_published(
    live: LiveServer, client: httpx.Client
) -> None:
    before = lifecycle_end(live)
    audit_id = unique("invalid")
    body = [
        started(audit_id),
        envelope("AuditStarted", audit_id, {"organization_id": "o"}),  # no project_id
        {**started(audit_id), "surprise": 1},  # unknown field
        envelope("AuditStarted", "bad id!", {"project_id": "p"}),
        {**started(audit_id), "occurred_at": "2026-01-01T00:00:00"},  # naive time
        envelope("ProbeRequested", audit_id, {"trigger": "manual"}),
        "not an object",
    ]
    response = client.post("/events", json=body)

    # (one item is a type only auditrec writes: the submission is refused, 403, naming every
    # problem all the same)
    assert response.status_code == 403
    detail = response.json()["detail"]
    assert [line.split(":")[0] for line in detail] == [f"item {i}" for i in range(1, 7)]
    assert "project_id" in detail[0]
    assert "surprise" in detail[1]
    assert "audit_id" in detail[2]
    assert "occurred_at" in detail[3]
    assert "ProbeRequested" in detail[4]
    assert lifecycle_end(live) == before
    assert client.get(f"/audits/{audit_id}", params={"probe": "false"}).status_code == 404


@pytest.mark.parametrize(
    ("content", "needle"),
    [(b"{not json", "not valid JSON"), (b"[]", "empty"), (b"[" * 100_000, "not valid JSON")],
)
def test_unparseable_bodies_are_422(
    live: LiveServer, client: httpx.Client, content: bytes, needle: str
) -> None:
    before = lifecycle_end(live)
    response = client.post("/events", content=content, headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert needle in response.json()["detail"][0]
    assert lifecycle_end(live) == before


# --- sweep -------------------------------------------------------------------------------


def test_sweep_returns_its_summary_when_the_outcomes_are_in(
    client: httpx.Client, _simulator_server: SimulatorServer
) -> None:
    dead = unique("sweep-dead")
    _simulator_server.sim.set_instance(f"wf-{dead}", "terminated")
    publish(client, started(dead, minutes_ago=45))
    wait_for(client, dead)

    dry = client.post("/sweep", params={"dry_run": "true"}, headers=JSON)
    assert dry.status_code == 200
    assert dry.json()["candidates"] >= 1 and dry.json()["probed"] == 0

    response = client.post("/sweep", headers=JSON)

    assert response.status_code == 200, response.text
    summary = response.json()
    mine = [a for a in summary["audits"] if a["audit_id"] == dead]
    assert mine and mine[0]["result"] == "failed"
    assert mine[0]["error_code"] == "workflow_terminated"
    assert summary["failed"].get("workflow_terminated", 0) >= 1
    assert summary["pending"] == 0
    row = client.get(f"/audits/{dead}", params={"probe": "false"}).json()
    assert row["status"] == "failed" and row["reconciled_by"] == "watchdog"


def test_without_a_pipeline_sweep_is_503_and_status_says_why(
    tmp_path: Path, simulator: SimulatorServer
) -> None:
    settings = server_settings(tmp_path, simulator)
    with LiveServer(["api", "projector"], **settings) as live, live.client() as client:
        audit_id = unique("alone")
        publish(client, started(audit_id))
        wait_for(client, audit_id)
        sweep = client.post("/sweep", headers=JSON)
        assert sweep.status_code == 503
        assert "auditrec serve" in sweep.json()["detail"]
        body = client.get(f"/audits/{audit_id}").json()
        assert body["status"] == "running" and body["reconciliation"] is None
        assert "not reconciled" in body["note"]


# --- health, readiness, metrics, docs -----------------------------------------------------


def test_health_readiness_and_metrics(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {
        "status": "ready",
        "checks": {"event_log": "ok", "database": "ok", "workflows_api": "ok"},
        "warnings": [],
    }

    metrics = client.get("/metrics")
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain")
    for name in (
        "auditrec_decisions_total",
        "auditrec_observations_judged_total",
        "auditrec_probes_total",
        "auditrec_probe_request_duration_seconds",
        "auditrec_probe_budget_left",
        "auditrec_probe_pauses_total",
        "auditrec_brake_engaged",
        "auditrec_decisions_held",
        "auditrec_consumer_lag_records",
        "auditrec_consumer_last_progress_timestamp_seconds",
        "auditrec_sweep_duration_seconds",
        "auditrec_watchdog_ticks_total",
        "auditrec_watchdog_tick_duration_seconds",
        "auditrec_watchdog_last_tick_timestamp_seconds",
        "auditrec_audits",
        "auditrec_audits_stale_running",
        "auditrec_audits_stalled",
        "auditrec_audits_retention_at_risk",
        "auditrec_oldest_running_age_seconds",
        "auditrec_dead_letters_total",
        "auditrec_http_requests_total",
        "auditrec_http_request_duration_seconds",
        "auditrec_telemetry_total",
        "auditrec_build_info",
    ):
        assert f"# TYPE {name.removesuffix('_total')}" in metrics.text, name
    lag = re.compile(
        r'auditrec_consumer_lag_records\{component="projector",partition="\d+",topic="t[0-9a-f]{8}'
        r'\.lifecycle\.v1"\} 0\.0'
    )
    eventually_sync(lambda: lag.search(client.get("/metrics").text), timeout=10)  # a heartbeat
    assert 'auditrec_http_requests_total{method="GET",route="/readyz",status="200"}' in metrics.text
    assert re.search(r'auditrec_build_info\{python="[\d.]+",version="[^"]+"\} 1\.0', metrics.text)


def test_readyz_names_what_is_unreachable(tmp_path: Path, simulator: SimulatorServer) -> None:
    with LiveServer(["api"], **server_settings(tmp_path, simulator)) as live:
        assert live.backends is not None
        store = live.backends.store
        live.call(store.stop)
        with live.client() as client:
            response = client.get("/readyz")
        assert response.status_code == 503
        body = response.json()
        assert body["status"] == "unavailable"
        assert body["checks"]["event_log"] == "ok"
        assert body["checks"]["database"].startswith("error")


def test_openapi_and_docs(client: httpx.Client) -> None:
    schema = client.get("/openapi.json").json()
    assert {
        "/audits/{audit_id}",
        "/audits",
        "/audits/{audit_id}/events",
        "/events",
        "/sweep",
    } <= set(schema["paths"])
    body = schema["paths"]["/events"]["post"]["requestBody"]["content"]["application/json"]
    assert "EventEnvelope" in str(body["schema"])
    assert "AuditStarted" in schema["components"]["schemas"]
    [status] = [p for p in schema["paths"]["/audits"]["get"]["parameters"] if p["name"] == "status"]
    assert tuple(status["schema"]["anyOf"][0]["enum"]) == AUDIT_STATUSES
    docs = client.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


# --- auth and size limits ----------------------------------------------------------------

GUARDED = [
    ("GET", "/audits/some-audit"),
    ("GET", "/audits"),
    ("GET", "/audits/some-audit/events"),
    ("POST", "/events"),
    ("POST", "/sweep"),
    ("GET", "/docs"),
    ("GET", "/openapi.json"),
    ("GET", "/readyz"),
]


@pytest.fixture(scope="module")
def guarded(
    tmp_path_factory: pytest.TempPathFactory, _simulator_server: SimulatorServer
) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("auth")
    settings = server_settings(
        tmp,
        _simulator_server,
        api_tokens="tok-alpha-0123456789, tok-bravo-0123456789",
        api_max_body_bytes=4096,
    )
    with LiveServer(API_AND_PIPELINE, **settings) as server:
        server.wait_pipeline_live()
        yield server


@pytest.mark.parametrize(("method", "path"), GUARDED)
@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong", "Bearer tok-alph", "Basic dG9rLWFscGhhOg==", "tok-alpha-0123456789"],
)
def test_every_route_but_health_and_metrics_needs_a_token(
    guarded: LiveServer, method: str, path: str, authorization: str | None
) -> None:
    headers = {"authorization": authorization} if authorization else {}
    with httpx.Client(base_url=guarded.url) as client:
        response = client.request(
            method, path, headers=headers, json=[] if method == "POST" else None
        )
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert "tok-" not in response.text


@pytest.mark.parametrize("path", ["/healthz", "/metrics"])
def test_health_and_metrics_need_no_token(guarded: LiveServer, path: str) -> None:
    with httpx.Client(base_url=guarded.url) as client:
        assert client.get(path).status_code == 200


def test_docs_are_served_with_swagger_ui_from_here(guarded: LiveServer) -> None:
    with guarded.client("tok-alpha-0123456789") as client:
        page = client.get("/docs")
        assert page.status_code == 200
        assert "/docs/assets/swagger-ui-bundle.js" in page.text
        assert "cdn." not in page.text and "unpkg" not in page.text
        for asset in ("swagger-ui-bundle.js", "swagger-ui.css"):
            assert client.get(f"/docs/assets/{asset}").status_code == 200


def test_docs_and_readiness_can_be_public_while_the_rest_needs_a_token(
    tmp_path: Path, simulator: SimulatorServer
) -> None:
    settings = server_settings(
        tmp_path,
        simulator,
        api_tokens="tok-alpha-0123456789",
        api_public_docs=True,
        api_public_readyz=True,
    )
    with LiveServer(["api"], **settings) as live, httpx.Client(base_url=live.url) as client:
        assert client.get("/openapi.json").json()["info"]["title"] == "auditrec"
        assert client.get("/docs").status_code == 200
        assert client.get("/readyz").status_code == 200
        assert client.get("/audits").status_code == 401


@pytest.mark.parametrize("token", ["tok-alpha-0123456789", "tok-bravo-0123456789"])
def test_each_configured_token_is_accepted(guarded: LiveServer, token: str) -> None:
    with guarded.client(token) as client:
        audit_id = unique("authed")
        publish(client, started(audit_id, minutes_ago=1))
        assert wait_for(client, audit_id)["status"] == "running"
        assert client.get("/audits").status_code == 200
        assert client.get(f"/audits/{audit_id}/events").status_code == 200
        assert client.get("/openapi.json").status_code == 200
        schemes = client.get("/openapi.json").json()["components"]["securitySchemes"]
        assert any(s.get("scheme") == "bearer" for s in schemes.values())


def test_bodies_beyond_the_limit_are_413_and_publish_nothing(guarded: LiveServer) -> None:
    before = lifecycle_end(guarded)
    audit_id = unique("big")
    big = [started(audit_id, start_url="https://example.com/" + "x" * 1500) for _ in range(3)]
    with guarded.client("tok-alpha-0123456789") as client:
        response = client.post("/events", json=big)
        assert response.status_code == 413
        assert "4096" in response.json()["detail"]

        def chunks() -> Iterator[bytes]:  # no Content-Length: the limit holds while streaming
            yield b"["
            for i, item in enumerate(big):
                yield (b"," if i else b"") + httpx.Response(200, json=item).content
            yield b"]"

        streamed = client.post(
            "/events", content=chunks(), headers={"content-type": "application/json"}
        )
        assert streamed.status_code == 413
        small = client.post("/events", json=big[:1])
        assert small.status_code == 202
    assert lifecycle_end(guarded) == before + 1


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"cloudflare_api_token": "wrong"}, "error: unauthorized"),
        ({"cloudflare_api_token": "right", "cloudflare_workflow": "nope"}, "error: workflow_not_found"),
    ],
    ids=["wrong-token", "unknown-workflow"],
)  # fmt: skip
def test_readyz_is_unavailable_when_the_workflows_api_cannot_be_used(
    tmp_path: Path, simulator: SimulatorServer, settings: dict[str, str], expected: str
) -> None:
    # given a Workflows API that wants another token, or has no such workflow
    simulator.sim.token = "right"
    server = LiveServer(["api"], **server_settings(tmp_path, simulator, **settings))
    with server as live, live.client() as client:
        response = client.get("/readyz")

    # then readiness says so, with the setting to fix, and the rest is fine
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["workflows_api"].startswith(expected)
    assert "AUDITREC_CLOUDFLARE_" in checks["workflows_api"]
    assert (checks["event_log"], checks["database"]) == ("ok", "ok")
    assert "right" not in response.text and "wrong" not in response.text


def test_the_api_socket_is_tcp_without_nagle() -> None:
    # asyncio sets TCP_NODELAY on the connections of an IPPROTO_TCP socket only; without it a
    # small answer waits ~40 ms for the client's delayed ACK
    from consumers.api.server import _bind

    sock = _bind("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    finally:
        sock.close()
