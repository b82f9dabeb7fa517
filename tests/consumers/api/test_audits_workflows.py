"""Workflows and stalls, visible and filterable, against a live API and its pipeline: the
listing by ``workflow`` (the default workflow's audits include those naming none) and by
``stalled`` over HTTP, on the command line, in the console and through the Python client; an
audit's workflow and stall verdict (with its evidence) on its page and in its row; the
overview's stalled count; and ``/readyz`` warning of running audits unobserved for half of
``AUDITREC_CLOUDFLARE_RETENTION``.

The data set's stall verdicts are the reconciler's report-mode ``AuditFailureSimulated``
events, appended to the log as auditrec's own components write them (no publisher may send
them); the last test has the pipeline find one (sweeps, the probe reading the simulator's
instance with its steps, the reconciler) and shows it listed and explained."""

from __future__ import annotations

import html
import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from consumers.operations.service import Operations
from consumers.workflows.simulator.server import SimulatorServer
from tests import cli
from tests.consumers.api.conftest import (
    API_AND_PIPELINE,
    JSON,
    LiveServer,
    as_written,
    envelope,
    publish,
    server_settings,
    wait_for,
)
from tests.eventually import eventually_sync

DEFAULT = "site-audit"  # AUDITREC_CLOUDFLARE_WORKFLOW
OTHER = "keyword-research"  # watched too (AUDITREC_CLOUDFLARE_WORKFLOWS)
UNWATCHED = "site-export"  # named by an audit, watched by no setting
STEP = "crawl-page"


def start(audit_id: str, at: datetime, workflow: str | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"project_id": "p-v", "workflow_instance_id": f"wf-{audit_id}"}
    if workflow is not None:
        data["workflow"] = workflow
    return envelope("AuditStarted", audit_id, data, at=at)


def stall(audit_id: str, at: datetime) -> dict[str, Any]:
    """A stall verdict as the reconciler records it in report mode."""
    return envelope(
        "AuditFailureSimulated",
        audit_id,
        {
            "error_code": "stalled",
            "error_detail": f"No progress for 50m while the instance was running (step {STEP!r})",
            "failed_by": "reconciler",
            "reconciled_by": "watchdog",
            "workflow_status": "running",
            "rule": "stalled",
            "policy": {
                "stalled_after_s": 2700.0,
                "stalled_action": "report",
                "observed_at": at.isoformat(),
                "progress_recorded_at": (at - timedelta(minutes=50)).isoformat(),
                "step": STEP,
                "step_attempts": 4,
                "step_retrying": True,
            },
        },
        at=at,
    )


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, _simulator_server: SimulatorServer) -> Any:
    tmp = tmp_path_factory.mktemp("workflows")
    settings = server_settings(
        tmp,
        _simulator_server,
        stale_running_after="48h",  # the watchdog leaves them be: the figures stay known
        cloudflare_workflows=f"{OTHER}",
        cloudflare_retention="2h",  # at risk: unobserved for an hour
    )
    now = datetime.now(UTC)
    with LiveServer(API_AND_PIPELINE, **settings) as server, server.client() as client:
        server.wait_pipeline_live()
        publish(
            client,
            start("v-plain", now - timedelta(minutes=30)),  # names none: the default's
            start("v-named", now - timedelta(minutes=29), DEFAULT),
            start("v-kw-old", now - timedelta(hours=3), OTHER),  # never observed: at risk
            start("v-kw-done", now - timedelta(minutes=40), OTHER),
            envelope("AuditCompleted", "v-kw-done", {}, at=now - timedelta(minutes=1)),
            start("v-export", now - timedelta(minutes=20), UNWATCHED),
        )
        for audit_id in ("v-plain", "v-named", "v-kw-old", "v-export"):
            wait_for(client, audit_id)
        backends = server.backends
        assert backends is not None
        verdicts = [
            stall("v-plain", now - timedelta(minutes=5)),
            stall("v-kw-old", now - timedelta(minutes=4)),
            stall("v-export", now - timedelta(minutes=3)),
        ]
        server.call(
            lambda: Operations(backends).publish(as_written(verdicts, "auditrec-reconciler"))
        )
        for audit_id in ("v-plain", "v-kw-old", "v-export"):
            wait_for(client, audit_id, lambda r: r["stalled_at"] is not None)
        # the publisher speaks again: no longer stalled
        publish(client, envelope("AuditProgressed", "v-export", {"pages_crawled": 9}))
        wait_for(client, "v-export", lambda r: r["stalled_at"] is None)
        server.env = {  # type: ignore[attr-defined]
            "AUDITREC_DATABASE_URL": settings["database_url"],
            "AUDITREC_EVENT_LOG_URL": settings["event_log_url"],
            "AUDITREC_TOPIC_PREFIX": settings["topic_prefix"],
            "AUDITREC_CLOUDFLARE_WORKFLOWS": OTHER,
        }
        yield server


@pytest.fixture
def client(live: LiveServer) -> Any:
    with live.client() as c:
        yield c


def listed(client: httpx.Client, **params: Any) -> list[str]:
    response = client.get("/audits", params=params)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["total"] == len(body["audits"])
    return sorted(a["audit_id"] for a in body["audits"])


def test_the_api_filters_by_workflow_and_by_stall(client: httpx.Client) -> None:
    # the default workflow's audits: those naming it and those naming none
    assert listed(client, workflow=DEFAULT) == ["v-named", "v-plain"]
    assert listed(client, workflow=OTHER) == ["v-kw-done", "v-kw-old"]
    assert listed(client, workflow=UNWATCHED) == ["v-export"]
    assert listed(client, workflow="nothing-here") == []
    # stalled: a verdict that still stands (v-export progressed since; v-kw-done never was)
    assert listed(client, stalled="true") == ["v-kw-old", "v-plain"]
    assert listed(client, stalled="false") == ["v-export", "v-kw-done", "v-named"]
    assert listed(client, workflow=OTHER, stalled="true") == ["v-kw-old"]
    assert listed(client, workflow=OTHER, status="completed") == ["v-kw-done"]
    # a workflow's name or nothing: 422 naming the parameter
    for bad in ("site audit", "x" * 65, "é", ""):
        refused = client.get("/audits", params={"workflow": bad})
        assert refused.status_code == 422, bad
        assert "workflow" in refused.text, refused.text
    refused = client.get("/audits", params={"stalled": "maybe"})
    assert refused.status_code == 422 and "stalled" in refused.text


def test_an_audits_row_has_its_workflow_and_stall_but_no_internal_column(
    client: httpx.Client,
) -> None:
    plain = client.get("/audits/v-plain", params={"probe": "false"}).json()
    assert plain["workflow"] is None  # the default's: none named
    assert plain["stalled_at"].endswith("Z")
    assert not {"progress_event_id", "termination_requested_at", "instance_ended_at"} & set(plain)
    other = client.get("/audits/v-kw-old", params={"probe": "false"}).json()
    assert (other["workflow"], other["status"]) == (OTHER, "running")
    assert other["stalled_at"] is not None


def test_the_cli_filters_with_the_same_names(live: LiveServer) -> None:
    env = live.env  # type: ignore[attr-defined]

    def audits(*args: str) -> list[str]:
        result = cli.run("audits", "--json", *args, env=env)
        assert result.returncode == 0, result.stderr
        return sorted(r["audit_id"] for r in json.loads(result.stdout))

    assert audits("--workflow", DEFAULT) == ["v-named", "v-plain"]
    assert audits("--workflow", OTHER, "--stalled") == ["v-kw-old"]
    assert audits("--stalled") == ["v-kw-old", "v-plain"]
    assert audits("--not-stalled", "--workflow", UNWATCHED) == ["v-export"]
    table = cli.run("audits", "--stalled", env=env)
    assert table.returncode == 0 and "running (stalled)" in table.stdout
    refused = cli.run("audits", "--workflow", "site audit", env=env)
    assert refused.returncode == 2 and "--workflow" in refused.stderr
    shown = cli.run("status", "v-plain", "--no-probe", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    row = json.loads(shown.stdout)
    assert row["workflow"] is None and row["stalled_at"] is not None
    assert "progress_event_id" not in row
    plain = cli.run("status", "v-plain", "--no-probe", env=env).stdout
    assert re.search(rf"\bworkflow  {DEFAULT} \(default\)\n", plain), plain
    text = cli.run("status", "v-kw-old", "--no-probe", env=env).stdout
    assert re.search(rf"\bworkflow  {OTHER}\n", text) and "stalled_at" in text
    helped = cli.run("audits", "--help", env=env).stdout
    assert "--workflow" in helped and "--stalled / --not-stalled" in helped


def test_the_console_lists_by_workflow_and_stall(client: httpx.Client) -> None:
    def rows(text: str) -> list[str]:
        return sorted(re.findall(r'<tr data-audit="([^"]+)"', text))

    default = client.get("/ui/audits", params={"workflow": DEFAULT})
    assert default.status_code == 200
    assert rows(default.text) == ["v-named", "v-plain"]
    # the select offers the watched workflows, then those audits name
    select = default.text.split('id="workflow-filter"')[1].split("</select>")[0]
    offered = re.findall(r'<option value="([^"]*)"', select)
    assert offered == ["", DEFAULT, OTHER, UNWATCHED]
    assert f'<option value="{DEFAULT}" selected>{DEFAULT} (default)</option>' in select
    # a filter by workflow or stall is no bulk selection
    assert 'id="bulk"' not in default.text and 'id="bulk-off"' in default.text

    stalled = client.get("/ui/audits", params={"stalled": "true"})
    assert rows(stalled.text) == ["v-kw-old", "v-plain"]
    assert stalled.text.count('data-stalled="true"') == 2
    assert stalled.text.count('class="badge stalled"') == 2
    assert '<option value="true" selected>stalled</option>' in stalled.text
    both = client.get("/ui/audits", params={"stalled": "false", "workflow": OTHER})
    assert rows(both.text) == ["v-kw-done"]
    # an audit of another workflow than the default is marked with it
    other = client.get("/ui/audits", params={"q": "v-kw-old"}).text
    assert f'<span class="badge workflow" title="workflow">{OTHER}</span>' in other

    bad = client.get("/ui/audits", params={"stalled": "maybe", "workflow": "a b"})
    assert bad.status_code == 422
    assert "stalled: true or false" in bad.text and "workflow: a workflow&#39;s name" in bad.text


def test_the_audit_page_shows_its_workflow_and_its_stall_verdict(client: httpx.Client) -> None:
    page = client.get("/ui/audits/v-plain").text
    assert re.search(rf'id="workflow">Workflow <code>{DEFAULT}</code> \(the default\)', page)
    assert '<tr data-column="workflow"><th>Workflow</th><td>site-audit</td></tr>' in page
    assert '<tr data-column="stalled_at"><th>Stalled since</th>' in page
    stall_section = page.split('id="stall"')[1].split("</section>")[0]
    assert "Stalled since" in stall_section
    assert f"(step {STEP!r})" in html.unescape(stall_section)
    evidence = dict(re.findall(r'data-evidence="([a-z_]+)">(.*?)</dd>', stall_section))
    assert evidence["step"] == STEP
    assert evidence["step_attempts"] == "4"
    assert evidence["step_retrying"] == "yes"
    assert evidence["stalled_after_s"] == "45m"
    assert "<time" in evidence["progress_recorded_at"]
    assert "AUDITREC_STALLED_ACTION=report" in stall_section

    other = client.get("/ui/audits/v-kw-old").text
    assert f'id="workflow">Workflow <code>{OTHER}</code></p>' in other
    assert 'id="stall"' in other
    # progress since the verdict: not stalled, nothing shown
    moved = client.get("/ui/audits/v-export").text
    assert 'id="stall"' not in moved and f"<code>{UNWATCHED}</code>" in moved


def test_the_overview_counts_the_stalled_and_links_to_them(client: httpx.Client) -> None:
    page = client.get("/ui").text
    card = (
        page.split('id="stalled-card"')[0].rsplit("<a ", 1)[1]
        + page.split('id="stalled-card"')[1].split("</a>")[0]
    )
    assert 'href="/ui/audits?stalled=true"' in card
    assert re.search(r'<span class="figure">2</span><span class="label">Stalled</span>', card)


def test_readyz_warns_of_audits_cloudflare_may_have_forgotten(client: httpx.Client) -> None:
    ready = client.get("/readyz")
    assert ready.status_code == 200, ready.text  # a warning, not unready
    assert ready.json()["status"] == "ready"
    [warning] = [w for w in ready.json()["warnings"] if "retention" in w]
    assert warning.startswith(
        "1 running audit may have lost their instance's error to retention "
        "(AUDITREC_CLOUDFLARE_RETENTION=2h)"
    )


def test_the_python_client_filters_by_workflow_and_stall(live: LiveServer) -> None:
    from auditrec_client import AuditrecClient

    with AuditrecClient(live.url) as auditrec:
        page = auditrec.audits(workflow=OTHER, stalled=True)
        assert [a["audit_id"] for a in page.audits] == ["v-kw-old"]
        assert page.audits[0]["workflow"] == OTHER
        assert auditrec.audits(workflow=DEFAULT, stalled=False).total == 1  # v-named
        with pytest.raises(ValueError, match="workflow"):
            auditrec.audits(workflow="site audit")


def test_a_stall_the_pipeline_reports_is_listed_and_shown_with_its_evidence(
    tmp_path: Path, simulator: SimulatorServer
) -> None:
    # given an audit whose instance runs a step that keeps failing, and whose publisher went
    # silent (stall detection on, one second; a sweep asks about every running audit)
    audit_id = f"v-stuck-{uuid.uuid4().hex[:8]}"
    error = {"name": "Error", "message": "fetch failed: 503"}
    simulator.sim.set_instance(
        f"wf-{audit_id}", "running", step={"name": "fetch", "attempts": 3, "error": error}
    )
    settings = server_settings(
        tmp_path, simulator, stale_running_after="1s", stalled_after="1s", sweep_wait="20s"
    )
    with LiveServer(API_AND_PIPELINE, **settings) as server, server.client() as client:
        server.wait_pipeline_live()
        publish(client, start(audit_id, datetime.now(UTC) - timedelta(hours=1)))
        wait_for(client, audit_id)

        # when sweeps probe it until its recorded progress is older than the threshold
        def swept() -> dict[str, Any]:
            response = client.post("/sweep", headers=JSON)
            assert response.status_code == 200, response.text
            row: dict[str, Any] = client.get(
                f"/audits/{audit_id}", params={"probe": "false"}
            ).json()
            return row

        row = eventually_sync(
            swept,
            until=lambda r: r["stalled_at"] is not None,
            timeout=30,
            interval=0.3,
            message="a sweep to report the audit stalled",
        )

        # then it is listed stalled, still running, and its page shows the verdict's evidence
        assert row["status"] == "running"
        assert listed(client, stalled="true") == [audit_id]
        assert listed(client, stalled="true", workflow=DEFAULT) == [audit_id]
        page = client.get(f"/ui/audits/{audit_id}").text
        section = html.unescape(page.split('id="stall"')[1].split("</section>")[0])
        assert "retrying: Error: fetch failed: 503" in section
        evidence = dict(re.findall(r'data-evidence="([a-z_]+)">(.*?)</dd>', section))
        assert (evidence["step"], evidence["step_attempts"], evidence["step_retrying"]) == (
            "fetch",
            "3",
            "yes",
        )
        assert evidence["stalled_after_s"] == "1s"
        assert "<time" in evidence["progress_recorded_at"]
        overview = client.get("/ui").text.split('id="stalled-card"')[1].split("</a>")[0]
        assert '<span class="figure">1</span>' in overview
        assert simulator.sim.terminates_for(f"wf-{audit_id}") == 0  # reported, not terminated
