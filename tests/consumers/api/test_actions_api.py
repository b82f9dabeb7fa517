"""Operator actions and token scopes over HTTP, against a real ``serve`` (API and pipeline) on
each backend pair and the Workflows simulator: 401/403/200 per route class, fail → restore →
probe with the acting token's name recorded, refusals (404, 409, 422) naming the problem, a
restored audit failed again by the reconciler, and bulk actions as dry runs unless told."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from consumers.workflows.simulator.server import SimulatorServer
from tests.conftest import Backend
from tests.consumers.api.conftest import (
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

TOKENS = (
    "viewer:tok-read-0123456789:read,ci:tok-pub-0123456789:publish,"
    "ops:tok-op-0123456789:operate,tok-bare-0123456789"
)


@pytest.fixture
def server(backend: Backend, tmp_path: Path, simulator: SimulatorServer) -> Iterator[LiveServer]:
    settings = server_settings(
        tmp_path,
        simulator,
        event_log_url=backend.event_log_url,
        database_url=backend.database_url,
        topic_prefix=backend.topic_prefix,
        api_tokens=TOKENS,
    )
    with LiveServer(API_AND_PIPELINE, **settings) as live:
        live.wait_pipeline_live()
        yield live


@pytest.fixture
def ops(server: LiveServer) -> Iterator[httpx.Client]:
    with server.client("tok-op-0123456789") as http:
        yield http


def events_of(client: httpx.Client, audit_id: str) -> list[dict[str, Any]]:
    response = client.get(f"/audits/{audit_id}/events")
    assert response.status_code == 200, response.text
    events: list[dict[str, Any]] = response.json()["events"]
    return events


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_each_route_class_needs_its_scope(server: LiveServer) -> None:
    audit_id = unique("scoped")
    calls = {
        "read": ("GET", "/audits", None),
        "publish": ("POST", "/events", started(audit_id)),
        "operate": ("POST", f"/audits/{audit_id}/fail", {"code": "oom", "reason": "r"}),
        "operate (brake)": ("POST", "/brake/release?dry_run=true", None),
    }
    # the lowest scope that may make each call
    allowed = {"read": "viewer", "publish": "ci", "operate": "ops", "operate (brake)": "ops"}
    tokens = {
        "viewer": "tok-read-0123456789",
        "ci": "tok-pub-0123456789",
        "ops": "tok-op-0123456789",
    }
    order = ["viewer", "ci", "ops"]

    for what, (method, path, body) in calls.items():
        for token in (None, "wrong-token"):
            with server.client(token) as http:
                answer = http.request(method, path, json=body, headers=JSON)
            assert answer.status_code == 401, (what, token, answer.text)
            assert "bearer token" in answer.json()["detail"]
        lowest = order.index(allowed[what])
        for name in order:
            with server.client(tokens[name]) as http:
                answer = http.request(method, path, json=body, headers=JSON)
            if order.index(name) < lowest:
                assert answer.status_code == 403, (what, name, answer.text)
                needed = what.split()[0]
                assert f"needs scope {needed}" in answer.json()["detail"]
                assert f"token {name!r}" in answer.json()["detail"]
            else:
                assert answer.status_code not in (401, 403), (what, name, answer.text)
    # a bare token has full access, named by its position
    with server.client("tok-bare-0123456789") as http:
        bare = unique("bare")
        publish(http, started(bare))
        wait_for(http, bare)
        done = http.post(f"/audits/{bare}/fail", json={"code": "oom", "reason": "drill"})
        assert (done.status_code, done.json()["actor"]) == (200, "token:token-4")


def test_an_operator_fails_restores_and_probes_an_audit(
    ops: httpx.Client, simulator: SimulatorServer
) -> None:
    # given a running audit whose workflow is alive, and one the workflow reported failed
    alive, reported = unique("alive"), unique("reported")
    simulator.sim.set_instance(f"wf-{alive}", "running")
    publish(ops, started(alive), started(reported))
    publish(
        ops,
        envelope(
            "AuditFailed",
            reported,
            {"error_code": "oom", "error_detail": "OOM", "failed_by": "workflow"},
        ),
    )
    wait_for(ops, reported, lambda r: r["status"] == "failed")

    # when an operator fails the running one
    answer = ops.post(f"/audits/{alive}/fail", json={"code": "deploy_reset", "reason": "stuck"})

    # then it is failed by the operator, named by the token
    assert answer.status_code == 200, answer.text
    done = answer.json()
    assert (done["before"], done["after"], done["actor"], done["dry_run"]) == (
        "running",
        "failed",
        "token:ops",
        False,
    )
    row = wait_for(ops, alive, lambda r: r["status"] == "failed")
    assert (row["failed_by"], row["error_code"], row["error_detail"]) == (
        "operator",
        "deploy_reset",
        "stuck",
    )
    failure = events_of(ops, alive)[-1]
    assert (failure["type"], failure["rule"], failure["data"]["actor"]) == (
        "AuditFailed",
        "operator_failed",
        "token:ops",
    )
    assert failure["event_id"] == done["event_id"]

    # refusals name the problem
    again = ops.post(f"/audits/{alive}/fail", json={"code": "oom", "reason": "again"})
    assert again.status_code == 409 and "only a running audit" in again.json()["detail"]
    bogus = ops.post(f"/audits/{alive}/fail", json={"code": "bogus", "reason": "x"})
    assert bogus.status_code == 422 and "step_timeout" in " ".join(bogus.json()["detail"])
    empty = ops.post(f"/audits/{alive}/fail", json={"code": "oom", "reason": ""})
    assert empty.status_code == 422 and "reason" in " ".join(empty.json()["detail"])
    unknown = ops.post("/audits/nobody-here/restore", json={"reason": "x"})
    assert unknown.status_code == 404 and "nobody-here" in unknown.json()["detail"]
    workflow = ops.post(f"/audits/{reported}/restore", json={"reason": "x"})
    assert workflow.status_code == 409 and "failed by workflow" in workflow.json()["detail"]

    # a dry run says what would happen and changes nothing
    preview = ops.post(f"/audits/{alive}/restore", json={"reason": "oops", "dry_run": True})
    assert preview.status_code == 200
    assert (preview.json()["after"], preview.json()["event_id"]) == ("running", None)
    assert wait_for(ops, alive)["status"] == "failed"

    # when the operator restores it, it runs again, and replay says who undid what
    back = ops.post(f"/audits/{alive}/restore", json={"reason": "oops, it was alive"})
    assert back.status_code == 200, back.text
    assert (back.json()["before"], back.json()["after"]) == ("failed", "running")
    row = wait_for(ops, alive, lambda r: r["status"] == "running")
    assert (row["error_code"], row["failed_by"]) == (None, None)
    step = events_of(ops, alive)[-1]
    assert (step["type"], step["rule"], step["before"], step["after"]) == (
        "AuditRestored",
        "restored",
        "failed",
        "running",
    )
    assert "undone by token:ops: oops, it was alive" in step["reason"]
    assert step["data"]["failure_id"] == done["event_id"]

    # and a probe now answers with the reconciler's outcome
    probed = ops.post(f"/audits/{alive}/probe", headers=JSON)
    assert probed.status_code == 200, probed.text
    assert probed.json()["outcome"]["result"] == "healthy"
    assert probed.json()["outcome"]["observed_status"] == "running"
    seen = events_of(ops, alive)[-1]
    assert (seen["type"], seen["data"]["trigger"], seen["data"]["actor"]) == (
        "WorkflowStatusObserved",
        "manual",
        "token:ops",
    )
    assert "(manual probe by token:ops)" in seen["reason"]
    assert ops.post(f"/audits/{reported}/probe", headers=JSON).status_code == 409


def test_a_restored_audit_is_failed_again_by_the_reconciler(ops: httpx.Client) -> None:
    # given an audit whose instance is gone, past the grace: a probe fails it
    lost = unique("lost")
    publish(ops, started(lost, minutes_ago=30))
    wait_for(ops, lost)
    first = ops.post(f"/audits/{lost}/probe", headers=JSON).json()
    assert (first["after"], first["outcome"]["error_code"]) == ("failed", "instance_lost")

    # when an operator restores it and it is probed again
    assert ops.post(f"/audits/{lost}/restore", json={"reason": "retry"}).status_code == 200
    wait_for(ops, lost, lambda r: r["status"] == "running")
    second = ops.post(f"/audits/{lost}/probe", headers=JSON).json()

    # then the reconciler fails it again, with a decision of its own
    assert (second["before"], second["after"]) == ("running", "failed")
    assert second["outcome"]["result"] == "failed"
    types = [e["type"] for e in events_of(ops, lost)]
    assert types.count("AuditFailed") == 2 and types.count("AuditRestored") == 1
    assert wait_for(ops, lost)["failed_by"] == "reconciler"


def test_bulk_actions_are_dry_runs_unless_told(ops: httpx.Client) -> None:
    project = unique("proj")
    audits = [unique("bulk") for _ in range(3)]
    publish(ops, *(started(a, project_id=project) for a in audits))
    for audit_id in audits:
        wait_for(ops, audit_id)
    body = {"project_id": project, "status": "running", "code": "oom", "reason": "bulk"}

    preview = ops.post("/audits/fail", json=body).json()
    assert (preview["dry_run"], preview["matched"], preview["acted"]) == (True, 3, 3)
    assert all(wait_for(ops, a)["status"] == "running" for a in audits)

    done = ops.post("/audits/fail", json={**body, "dry_run": False}).json()
    assert (done["dry_run"], done["acted"]) == (False, 3)
    assert all(r["event_id"] for r in done["results"])
    for audit_id in audits:
        wait_for(ops, audit_id, lambda r: r["status"] == "failed" and r["failed_by"] == "operator")

    restore = {"project_id": project, "error_code": "oom", "reason": "undo", "dry_run": False}
    undone = ops.post("/audits/restore", json=restore).json()
    assert (undone["matched"], undone["acted"], undone["skipped"]) == (3, 3, [])
    for audit_id in audits:
        wait_for(ops, audit_id, lambda r: r["status"] == "running")

    bad = ops.post("/audits/fail", json={**body, "older_than": "soon"})
    assert bad.status_code == 422 and "older_than" in " ".join(bad.json()["detail"])


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_no_token_publishes_what_only_auditrec_writes(server: LiveServer) -> None:
    audit_id = unique("publisher")
    failure = {"error_code": "oom", "error_detail": "x", "failed_phase": "crawl"}
    by_operator = envelope("AuditFailed", audit_id, {**failure, "failed_by": "operator"})
    release = envelope(
        "AuditFailureReleased",
        audit_id,
        {"held_id": "3e2d1c0b-9a8f-4e7d-8c6b-5a4f3e2d1c0b", "actor": "ci", "reason": "r"},
    )
    by_workflow = envelope("AuditFailed", audit_id, {**failure, "failed_by": "workflow"})
    for token in ("tok-pub-0123456789", "tok-op-0123456789"):
        with server.client(token) as client:
            # an operator's failure, or a brake decision, is refused as a whole, naming the
            # item and its type, whatever the token's scope
            for body, what in (
                ([started(audit_id), by_operator], "failed_by 'operator'"),
                ([release], "AuditFailureReleased is written by auditrec only"),
            ):
                refused = client.post("/events", json=body)
                assert refused.status_code == 403, refused.text
                (problem,) = refused.json()["detail"]
                assert problem.startswith(f"item {len(body) - 1}:") and what in problem
    # and a service's own lifecycle, its workflow's failure included, is published
    with server.client("tok-pub-0123456789") as ci:
        accepted = ci.post("/events", json=[started(audit_id), by_workflow])
        assert accepted.status_code == 202, accepted.text
