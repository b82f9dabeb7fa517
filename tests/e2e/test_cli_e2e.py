"""The CLI end to end, as a user runs it: publish → serve → sweep → audits → status → replay,
on both backend pairs, against the Workflows simulator over real HTTP."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from consumers.workflows.simulator.server import SimulatorServer
from projections.row import COLUMNS
from tests import cli
from tests.cli import AUDITREC
from tests.conftest import Backend
from tests.consumers.api.conftest import free_port
from tests.eventually import eventually_sync


def run(
    backend: Backend,
    *args: str,
    env: dict[str, str],
    input: str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """The CLI in this process (``timeout`` is pytest-timeout's then)."""
    return cli.run(*args, env=env, input=input)


def envelope(kind: str, audit_id: str, at: datetime, **data: Any) -> str:
    return json.dumps(
        {
            "type": kind,
            "audit_id": audit_id,
            "occurred_at": at.isoformat(),
            "producer": "crawler",
            "data": data,
        }
    )


@pytest.fixture
def env(backend: Backend, simulator: SimulatorServer) -> dict[str, str]:
    return backend.environ(
        AUDITREC_CLOUDFLARE_API_URL=simulator.url,
        AUDITREC_CLOUDFLARE_ACCOUNT_ID="acct-1",
        AUDITREC_SWEEP_WAIT="60s",
        AUDITREC_LOG_FORMAT="json",
    )


def scenario(simulator: SimulatorServer) -> tuple[str, dict[str, tuple[str, str | None]]]:
    """JSON Lines for six audits, the simulator set up, and the expected (status, code)."""
    now = datetime.now(UTC)
    old = now - timedelta(hours=2)
    sim = simulator.sim
    sim.set_instance(
        "wf-oom", "errored", error={"name": "Error", "message": "Worker exceeded memory limit"}
    )
    sim.set_instance("wf-healthy", "running")
    sim.set_instance("wf-done-late", "complete", end=now - timedelta(minutes=30))
    sim.set_instance("wf-term", "terminated")
    lines = [
        envelope(
            "AuditStarted",
            "a-oom",
            old,
            project_id="p1",
            workflow_instance_id="wf-oom",
            started_by_user_id="u1",
            organization_id="o1",
        ),
        envelope(
            "AuditProgressed",
            "a-oom",
            old + timedelta(minutes=1),
            current_phase="crawl",
            pages_crawled=12,
        ),
        envelope(
            "AuditStarted", "a-healthy", old, project_id="p1", workflow_instance_id="wf-healthy"
        ),
        envelope(
            "AuditStarted", "a-finalize", old, project_id="p1", workflow_instance_id="wf-done-late"
        ),
        envelope("AuditStarted", "a-term", old, project_id="p1", workflow_instance_id="wf-term"),
        envelope("AuditStarted", "a-expired", old, project_id="p1", workflow_instance_id="wf-gone"),
        envelope(
            "AuditStarted",
            "a-young",
            now - timedelta(minutes=2),
            project_id="p1",
            workflow_instance_id="wf-young",
        ),
        envelope("AuditStarted", "a-done", old, project_id="p1", workflow_instance_id="wf-x"),
        envelope("AuditCompleted", "a-done", old + timedelta(minutes=20), pages_crawled=5),
    ]
    expected = {
        "a-oom": ("failed", "oom"),
        "a-healthy": ("running", None),
        "a-finalize": ("failed", "finalize_lost"),
        "a-term": ("failed", "workflow_terminated"),
        "a-expired": ("failed", "instance_lost"),
        "a-young": ("running", None),
        "a-done": ("completed", None),
    }
    return "\n".join(lines) + "\n", expected


def audits(backend: Backend, env: dict[str, str]) -> dict[str, dict[str, Any]]:
    result = run(backend, "audits", "--json", "--limit", "1000", env=env)
    assert result.returncode == 0, result.stderr
    return {row["audit_id"]: row for row in json.loads(result.stdout)}


def test_publish_serve_sweep_audits_status_replay(
    backend: Backend, env: dict[str, str], simulator: SimulatorServer, tmp_path: Path
) -> None:
    # given a file of lifecycle events and a serve process running the pipeline
    text, expected = scenario(simulator)
    events_file = tmp_path / "events.jsonl"
    events_file.write_text(text)
    assert run(backend, "init", env=env).returncode == 0
    published = run(backend, "publish", str(events_file), "--json", env=env)
    assert published.returncode == 0, published.stderr
    assert json.loads(published.stdout)["published"] == 9

    log_file = (tmp_path / "serve.log").open("w")
    serve = subprocess.Popen(
        [AUDITREC, "serve", "--only", "projector,reconciler,probe"],
        env=env,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        eventually_sync(
            lambda: audits(backend, env),
            until=lambda rows: len(rows) == 7,
            timeout=60,
            interval=0.3,
            message="serve to project the 7 audits",
        )

        # when the operator sweeps
        swept = run(backend, "sweep", "--json", env=env)
        assert swept.returncode == 0, swept.stderr
        summary = json.loads(swept.stdout)

        # then the dead audits are failed with their codes, in the summary and in the table
        assert summary["candidates"] == 5  # every stale running audit; not the young or done one
        assert summary["failed"] == {
            "oom": 1,
            "finalize_lost": 1,
            "workflow_terminated": 1,
            "instance_lost": 1,
        }
        assert summary["healthy"] == 1
        assert summary["pending"] == 0
        rows = audits(backend, env)
        for audit_id, (status, code) in expected.items():
            assert (rows[audit_id]["status"], rows[audit_id]["error_code"]) == (status, code), (
                audit_id
            )
        oom = rows["a-oom"]
        assert oom["failed_by"] == "reconciler"
        assert oom["reconciled_by"] == "watchdog"
        assert oom["failed_phase"] == "crawl"
        assert oom["last_observed_status"] == "errored"
        assert oom["failed_at"] is not None and oom["completed_at"] is None
        assert set(oom) >= {
            "audit_id",
            "project_id",
            "organization_id",
            "started_by_user_id",
            "start_url",
            "workflow_instance_id",
            "status",
            "current_phase",
            "pages_crawled",
            "pages_total",
            "started_at",
            "completed_at",
            "failed_at",
            "error_code",
            "error_detail",
            "failed_phase",
            "failed_by",
            "reconciled_by",
            "last_observed_status",
            "last_observed_at",
            "overturned",
            "version",
            "last_event_id",
            "updated_at",
        }

        # and status on a running audit probes it on demand (the young one: not_found, too young)
        simulator.sim.delete_instance("wf-young")
        before = simulator.sim.requests_for("wf-young")
        status = run(backend, "status", "a-young", "--json", env=env)
        assert status.returncode == 0, status.stderr
        body = json.loads(status.stdout)
        assert tuple(body) == COLUMNS  # exactly the row, in DESIGN §6 order
        assert body["status"] == "running"
        [line] = [ln for ln in status.stderr.splitlines() if ln.startswith("reconciliation: ")]
        reconciliation = json.loads(line.removeprefix("reconciliation: "))
        assert reconciliation["rule"] == "instance_lost"
        assert "< grace" in reconciliation["reason"]
        assert simulator.sim.requests_for("wf-young") == before + 1
        # a second read within the interval does not probe again
        again = run(backend, "status", "a-young", "--json", env=env)
        assert again.returncode == 0
        assert simulator.sim.requests_for("wf-young") == before + 1

        # and an unknown audit is a clear runtime error
        missing = run(backend, "status", "nope", env=env)
        assert missing.returncode == 1
        assert "unknown audit 'nope'" in missing.stderr

        # and replay explains the decision with its rule
        replay = run(backend, "replay", "a-oom", "--json", env=env)
        assert replay.returncode == 0, replay.stderr
        steps = json.loads(replay.stdout)
        assert [s["type"] for s in steps] == [
            "AuditStarted",
            "AuditProgressed",
            "WorkflowStatusObserved",
            "AuditFailed",
        ]
        assert steps[2]["rule"] == "errored" and steps[2]["after"] == "running"
        assert steps[3]["before"] == "running" and steps[3]["after"] == "failed"

        # and a sweep or a status read right after a publish sees what was just published
        simulator.sim.set_instance("wf-late", "terminated")
        old = datetime.now(UTC) - timedelta(hours=3)
        late = envelope(
            "AuditStarted", "a-late", old, project_id="p1", workflow_instance_id="wf-late"
        )
        assert run(backend, "publish", "-", env=env, input=late + "\n").returncode == 0
        swept = run(backend, "sweep", "--json", env=env)
        assert swept.returncode == 0, swept.stderr
        assert json.loads(swept.stdout)["failed"] == {"workflow_terminated": 1}
        simulator.sim.set_instance("wf-now", "errored", error="Worker exceeded CPU time limit.")
        now_ = envelope(
            "AuditStarted", "a-now", old, project_id="p1", workflow_instance_id="wf-now"
        )
        assert run(backend, "publish", "-", env=env, input=now_ + "\n").returncode == 0
        status = run(backend, "status", "a-now", "--json", env=env)
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["error_code"] == "cpu_limit"
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            code = serve.wait(timeout=30)
        except subprocess.TimeoutExpired:
            serve.kill()
            raise
    log_file.close()
    assert code == 0, (tmp_path / "serve.log").read_text()[-3000:]


def test_publish_rejects_a_file_with_any_invalid_line_and_publishes_nothing(
    backend: Backend, env: dict[str, str], tmp_path: Path
) -> None:
    now = datetime.now(UTC)
    lines = [
        envelope("AuditStarted", "a-1", now, project_id="p"),
        '{"type": "AuditStarted", "audit_id": "a 2", "data": {"project_id": "p"}}',
        envelope("AuditStarted", "a-3", now, project_id="p"),
        "{not json",
        json.dumps(
            {
                "type": "AuditStarted",
                "audit_id": "a-5",
                "occurred_at": "2026-11-30T08:00:00",
                "data": {"project_id": "p"},
            }
        ),
        json.dumps({"type": "Nope", "audit_id": "a-6", "data": {}}),
    ]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = run(backend, "publish", str(path), env=env)
    assert result.returncode == 2
    assert "line 2: audit_id: must be 1-128 characters" in result.stderr
    assert "line 4: not valid JSON" in result.stderr
    assert "line 5:" in result.stderr and "timezone" in result.stderr
    assert "line 6:" in result.stderr
    assert "line 1:" not in result.stderr and "line 3:" not in result.stderr
    drained = run(backend, "serve", "--until-idle", "--only", "projector", env=env)
    assert drained.returncode == 0, drained.stderr
    assert audits(backend, env) == {}


def test_sweep_without_serve_says_so_and_inline_runs_the_pipeline(
    backend: Backend, env: dict[str, str], simulator: SimulatorServer
) -> None:
    text, _ = scenario(simulator)
    assert run(backend, "publish", "-", env=env, input=text).returncode == 0
    refused = run(backend, "sweep", env=env)
    assert refused.returncode == 1
    assert "no running `auditrec serve`" in refused.stderr and "--inline" in refused.stderr

    inline = run(backend, "sweep", "--inline", "--json", env=env)
    assert inline.returncode == 0, inline.stderr
    assert sum(json.loads(inline.stdout)["failed"].values()) == 4
    assert audits(backend, env)["a-oom"]["status"] == "failed"


def test_serve_until_idle_drains_and_reconciles_with_its_watchdog(
    backend: Backend, env: dict[str, str], simulator: SimulatorServer
) -> None:
    text, expected = scenario(simulator)
    assert run(backend, "publish", "-", env=env, input=text).returncode == 0
    drained = run(backend, "serve", "--until-idle", env=env)
    assert drained.returncode == 0, drained.stderr
    rows = audits(backend, env)
    assert {a: (r["status"], r["error_code"]) for a, r in rows.items()} == expected

    # and the listing filters, and pages with the cursor it prints
    def listed(*args: str) -> tuple[list[str], str]:
        result = run(backend, "audits", "--json", *args, env=env)
        assert result.returncode == 0, result.stderr
        return [r["audit_id"] for r in json.loads(result.stdout)], result.stderr

    assert listed("--code", "oom")[0] == ["a-oom"]
    assert listed("--status", "running", "--older-than", "1h")[0] == ["a-healthy"]
    assert listed("--project", "nope")[0] == []
    first, said = listed("--project", "p1", "--limit", "4")
    cursor = said.split("more: --cursor ")[1].split()[0]
    rest, said = listed("--project", "p1", "--cursor", cursor)
    assert "more:" not in said
    assert sorted(first + rest) == sorted(expected) and not set(first) & set(rest)
    bad = run(backend, "audits", "--cursor", "bogus", env=env)
    assert bad.returncode == 2 and "--cursor: not a cursor" in bad.stderr

    # and a rebuild from the log gives the same table
    rebuilt = run(backend, "rebuild", "--yes", env=env)
    assert rebuilt.returncode == 0, rebuilt.stderr
    again = audits(backend, env)
    for row in (*rows.values(), *again.values()):
        row.pop("updated_at")
    assert again == rows


def test_invalid_configuration_names_the_variable(backend: Backend, env: dict[str, str]) -> None:
    result = run(backend, "audits", env={**env, "AUDITREC_STALE_RUNNING_AFTER": "soon"})
    assert result.returncode == 2
    assert "AUDITREC_STALE_RUNNING_AFTER" in result.stderr


@pytest.fixture
def embedded(tmp_path: Path) -> Backend:
    return Backend(
        "sqlite", f"sqlite:///{tmp_path}/events.db", f"sqlite:///{tmp_path}/audits.db", "tq"
    )


@pytest.mark.parametrize(
    ("settings", "missing"),
    [
        ({}, ["AUDITREC_CLOUDFLARE_API_TOKEN", "AUDITREC_CLOUDFLARE_ACCOUNT_ID"]),
        ({"AUDITREC_CLOUDFLARE_API_TOKEN": "t"}, ["AUDITREC_CLOUDFLARE_ACCOUNT_ID"]),
    ],
)
def test_serve_refuses_to_probe_cloudflare_without_a_token_and_an_account(
    embedded: Backend, settings: dict[str, str], missing: list[str]
) -> None:
    # given Cloudflare's own API URL (the default) without credentials
    env = embedded.environ(**settings)

    # when the probe is started
    refused = run(embedded, "serve", "--only", "probe", "--until-idle", env=env, timeout=60)

    # then serve exits as for invalid input, naming what to set
    assert refused.returncode == 2, refused.stderr
    for name in missing:
        assert name in refused.stderr
    assert "AUDITREC_CLOUDFLARE_API_URL" in refused.stderr


def test_a_sweep_whose_every_probe_failed_exits_non_zero_with_the_cause(
    embedded: Backend, simulator: SimulatorServer
) -> None:
    # given stale running audits, and a Workflows API that refuses our token
    simulator.sim.token = "the-right-one"
    env = embedded.environ(
        AUDITREC_CLOUDFLARE_API_URL=simulator.url,
        AUDITREC_CLOUDFLARE_ACCOUNT_ID="acct-1",
        AUDITREC_CLOUDFLARE_API_TOKEN="a-wrong-one",
    )
    old = datetime.now(UTC) - timedelta(hours=2)
    lines = [
        envelope("AuditStarted", f"a-{i}", old, project_id="p", workflow_instance_id=f"wf-{i}")
        for i in range(3)
    ]
    assert run(embedded, "publish", "-", env=env, input="\n".join(lines)).returncode == 0

    # when a sweep runs
    swept = run(embedded, "sweep", "--inline", env=env)

    # then it says that it saw nothing, and why, and exits 1
    assert swept.returncode == 1, swept.stdout + swept.stderr
    assert "every probe of this sweep failed (unauthorized 3)" in swept.stderr
    assert "AUDITREC_CLOUDFLARE_API_TOKEN" in swept.stderr
    assert "a-wrong-one" not in swept.stdout + swept.stderr


def test_publish_needs_only_the_event_log(embedded: Backend) -> None:
    # given a reachable event log and a database nobody listens for
    env = embedded.environ(AUDITREC_DATABASE_URL="postgresql://postgres@127.0.0.1:9/nowhere")
    line = envelope("AuditStarted", "a-1", datetime.now(UTC), project_id="p")

    # when events are published
    published = run(embedded, "publish", "-", "--json", env=env, input=line, timeout=60)

    # then they are in the log, the database untouched
    assert published.returncode == 0, published.stderr
    assert json.loads(published.stdout)["published"] == 1


def test_serve_answers_healthz_at_once_and_says_what_is_still_starting(
    embedded: Backend, simulator: SimulatorServer, tmp_path: Path
) -> None:
    # given an event log nobody listens for (the broker is not up yet), and a free port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = embedded.environ(
        AUDITREC_EVENT_LOG_URL="kafka://127.0.0.1:9",
        AUDITREC_CLOUDFLARE_API_URL=simulator.url,
        AUDITREC_CLOUDFLARE_ACCOUNT_ID="acct-1",
        AUDITREC_API_PORT=str(port),
        AUDITREC_LOG_FORMAT="json",
    )
    log_file = tmp_path / "serve.log"
    with log_file.open("w") as sink:
        serve = subprocess.Popen([AUDITREC, "serve"], env=env, stdout=sink, stderr=sink)
        try:
            # when it is asked for its health while it waits for the broker
            def get(path: str) -> httpx.Response | None:
                try:
                    return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=2)
                except httpx.TransportError:
                    return None

            alive = eventually_sync(
                lambda: get("/healthz"), until=lambda r: r is not None, timeout=30
            )
            ready = get("/readyz")
            eventually_sync(
                lambda: log_file.read_text(),
                until=lambda t: "backends: unavailable" in t,
                timeout=30,
            )
            time.sleep(3)  # on purpose: a few retries more, each of which must not log again
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.wait(timeout=30)

    # then it is alive, not ready, and names the components still starting
    assert alive is not None and alive.status_code == 200
    assert ready is not None and ready.status_code == 503
    checks = ready.json()["checks"]
    assert checks["component projector"] == "error: starting"
    assert checks["event_log"].startswith("error:")
    # and the outage is logged once, however often the connection is retried
    lines = [json.loads(line) for line in log_file.read_text().splitlines() if line.startswith("{")]
    warned = [x for x in lines if x.get("event") == "backends: unavailable; retrying"]
    assert len(warned) == 1, warned
    assert warned[0]["error_class"] == "EventLogError"
    assert "KafkaConnectionError: KafkaConnectionError" not in warned[0]["error"]


def test_a_serve_without_the_api_serves_its_metrics_on_the_metrics_port(
    tmp_path: Path, simulator: SimulatorServer, embedded: Backend
) -> None:
    # given the reconciler alone, and some work for it
    port = free_port()
    env = embedded.environ(
        AUDITREC_CLOUDFLARE_API_URL=simulator.url,
        AUDITREC_METRICS_PORT=str(port),
        AUDITREC_LOG_FORMAT="json",
    )
    assert run(embedded, "init", env=env).returncode == 0
    started = envelope(
        "AuditStarted", "a-m", datetime.now(UTC), project_id="p-1", workflow_instance_id="wf-m"
    )
    assert run(embedded, "publish", "-", env=env, input=started).returncode == 0
    with (tmp_path / "serve.log").open("w") as sink:
        serve = subprocess.Popen(
            [AUDITREC, "serve", "--only", "reconciler"], env=env, stdout=sink, stderr=sink
        )
        try:
            # when its metrics are scraped
            def scrape() -> str:
                try:
                    return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
                except httpx.TransportError:
                    return ""

            text = eventually_sync(
                scrape,
                until=lambda t: 'auditrec_consumer_lag_records{component="reconciler"' in t,
                timeout=30,
            )
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.wait(timeout=30)

    # then they are this process's: its consumer's progress and lag, and the build
    assert 'auditrec_consumer_last_progress_timestamp_seconds{component="reconciler"' in text
    assert "auditrec_build_info{" in text
    assert "auditrec_http_requests_total{" not in text  # no API here


def test_serve_on_a_busy_port_exits_at_once_naming_the_setting(
    simulator: SimulatorServer, embedded: Backend
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = embedded.environ(
            AUDITREC_CLOUDFLARE_API_URL=simulator.url, AUDITREC_API_PORT=str(port)
        )
        result = run(embedded, "serve", env=env, timeout=60)
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "AUDITREC_API_PORT" in result.stderr


def test_serve_says_where_its_api_is_and_what_it_runs(
    tmp_path: Path, simulator: SimulatorServer, embedded: Backend
) -> None:
    port = free_port()
    env = embedded.environ(
        AUDITREC_CLOUDFLARE_API_URL=simulator.url,
        AUDITREC_API_PORT=str(port),
        AUDITREC_LOG_FORMAT="json",
    )
    log_file = tmp_path / "serve.log"
    with log_file.open("w") as sink:
        serve = subprocess.Popen([AUDITREC, "serve"], env=env, stdout=sink, stderr=sink)
        try:
            lines = eventually_sync(
                lambda: [json.loads(x) for x in log_file.read_text().splitlines() if x[:1] == "{"],
                until=lambda found: any(x.get("event") == "serving" for x in found),
                timeout=30,
            )
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.wait(timeout=30)
    api = next(x for x in lines if x.get("event") == "api")
    assert api["url"] == f"http://127.0.0.1:{port}"
    serving = next(x for x in lines if x.get("event") == "serving")
    assert set(serving["components"]) >= {"projector", "reconciler", "probe", "watchdog", "api"}


@pytest.mark.parametrize(
    "command", [["audits"], ["replay", "a-1"], ["status", "--no-probe", "a-1"]]
)
def test_read_only_commands_never_create_a_schema_and_say_to_run_init(
    backend: Backend, env: dict[str, str], command: list[str]
) -> None:
    result = run(backend, *command, env=env)
    assert result.returncode == 2, result.stderr
    assert "run `auditrec init`" in result.stderr
    again = run(backend, *command, env=env)  # still nothing there to read
    assert again.returncode == 2 and "run `auditrec init`" in again.stderr
    assert run(backend, "init", env=env).returncode == 0
    after = run(backend, *command, env=env)
    assert "auditrec init" not in after.stderr


def test_a_request_cut_by_shutdown_gets_json_503_and_a_second_signal_exits_at_once(
    tmp_path: Path, simulator: SimulatorServer, embedded: Backend
) -> None:
    # given a serve whose Workflows API answers after 30 s, and a running audit to read
    simulator.sim.latency_ms = 30_000
    port = free_port()
    env = embedded.environ(
        AUDITREC_CLOUDFLARE_API_URL=simulator.url,
        AUDITREC_API_PORT=str(port),
        AUDITREC_ON_DEMAND_WAIT="60s",
        AUDITREC_PROBE_TIMEOUT="60s",
    )
    assert run(embedded, "init", env=env).returncode == 0
    old = datetime.now(UTC) - timedelta(hours=2)
    line = envelope("AuditStarted", "a-slow", old, project_id="p1", workflow_instance_id="wf-s")
    assert run(embedded, "publish", "-", env=env, input=line).returncode == 0
    base = f"http://127.0.0.1:{port}"

    def read(path: str) -> httpx.Response | None:
        try:
            return httpx.get(base + path, timeout=60)
        except httpx.TransportError:
            return None

    results: list[httpx.Response | None] = []
    with (tmp_path / "serve.log").open("w") as sink:
        serve = subprocess.Popen([AUDITREC, "serve"], env=env, stdout=sink, stderr=sink)
        try:
            eventually_sync(
                lambda: read("/audits/a-slow?probe=false"),
                until=lambda r: r is not None and r.status_code == 200,
                timeout=30,
            )
            # when a read waits on the slow probe, and serve is told to stop
            reader = threading.Thread(target=lambda: results.append(read("/audits/a-slow")))
            reader.start()
            time.sleep(1.0)  # on purpose: the read reaches serve (nothing outside shows it)
            serve.send_signal(signal.SIGTERM)
            reader.join(timeout=30)
            graceful = serve.wait(timeout=30)
        finally:
            if serve.poll() is None:
                serve.kill()

    # then the read is answered 503 with JSON, and serve ends cleanly
    [cut] = results
    assert cut is not None and cut.status_code == 503, cut.text if cut is not None else None
    assert cut.json()["detail"].startswith("shutting down")
    assert graceful == 0
    assert "Traceback" not in (tmp_path / "serve.log").read_text()

    # and a second signal while it drains ends it at once
    with (tmp_path / "serve2.log").open("w") as sink:
        serve = subprocess.Popen([AUDITREC, "serve"], env=env, stdout=sink, stderr=sink)
        try:
            eventually_sync(lambda: read("/healthz"), until=lambda r: r is not None, timeout=30)
            reader = threading.Thread(target=lambda: read("/audits/a-slow"))
            reader.start()
            time.sleep(1.0)  # on purpose: the read reaches serve (nothing outside shows it)
            serve.send_signal(signal.SIGTERM)
            eventually_sync(
                lambda: (tmp_path / "serve2.log").read_text(),
                until=lambda t: "stopping: finishing the batches in hand" in t,
                timeout=30,
            )
            started = time.monotonic()
            serve.send_signal(signal.SIGTERM)
            forced = serve.wait(timeout=10)
            took = time.monotonic() - started
        finally:
            if serve.poll() is None:
                serve.kill()
    assert forced == 130 and took < 5
    assert "second signal" in (tmp_path / "serve2.log").read_text()


def ready(port: int) -> bool:
    """Whether the serve on ``port`` says every component is ready."""
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_a_sweep_shows_progress_and_says_so_when_its_serve_goes_away(
    tmp_path: Path, simulator: SimulatorServer, embedded: Backend
) -> None:
    # given a serve whose Workflows API answers slowly, and stale audits for a sweep
    simulator.sim.latency_ms = 20_000
    port = free_port()
    env = embedded.environ(
        AUDITREC_CLOUDFLARE_API_URL=simulator.url,
        AUDITREC_API_PORT=str(port),
        AUDITREC_SWEEP_WAIT="60s",
        AUDITREC_PROBE_TIMEOUT="60s",
    )
    assert run(embedded, "init", env=env).returncode == 0
    old = datetime.now(UTC) - timedelta(hours=2)
    lines = [
        envelope("AuditStarted", f"a-{i}", old, project_id="p1", workflow_instance_id=f"wf-{i}")
        for i in range(3)
    ]
    assert run(embedded, "publish", "-", env=env, input="\n".join(lines)).returncode == 0
    with (tmp_path / "serve.log").open("w") as sink:
        serve = subprocess.Popen([AUDITREC, "serve"], env=env, stdout=sink, stderr=sink)
        try:
            eventually_sync(
                lambda: ready(port), until=lambda up: up, timeout=60, message="serve ready"
            )
            # when a sweep waits on it and the serve stops
            said_file = tmp_path / "sweep.err"
            with said_file.open("w") as said_sink:
                sweep = subprocess.Popen(
                    [AUDITREC, "sweep"], env=env, stdout=subprocess.DEVNULL, stderr=said_sink
                )
                eventually_sync(
                    said_file.read_text, until=lambda t: "waiting for outcomes" in t, timeout=30
                )
                serve.send_signal(signal.SIGTERM)
                sweep.wait(timeout=60)
            said = said_file.read_text()
        finally:
            if serve.poll() is None:
                serve.kill()
            serve.wait(timeout=30)

    # then the sweep showed its progress, then said the serve went away, and failed
    assert "waiting for outcomes: 0/3" in said
    assert "went away while this sweep waited" in said
    assert sweep.returncode == 1


def test_shell_completion_completes_commands() -> None:
    env = {**os.environ, "COMP_WORDS": "auditrec sw", "COMP_CWORD": "1",
           "_AUDITREC_COMPLETE": "bash_complete"}  # fmt: skip
    result = subprocess.run([AUDITREC], env=env, capture_output=True, text=True, timeout=30)
    assert "plain,sweep" in result.stdout.splitlines()


def test_a_status_read_says_so_when_its_serve_goes_away(
    tmp_path: Path, simulator: SimulatorServer, embedded: Backend
) -> None:
    # given a serve whose Workflows API answers slowly, and a running audit to read
    simulator.sim.latency_ms = 20_000
    env = embedded.environ(
        AUDITREC_CLOUDFLARE_API_URL=simulator.url,
        AUDITREC_API_PORT=str(free_port()),
        AUDITREC_ON_DEMAND_WAIT="30s",
        AUDITREC_PROBE_TIMEOUT="60s",
    )
    assert run(embedded, "init", env=env).returncode == 0
    old = datetime.now(UTC) - timedelta(hours=2)
    line = envelope("AuditStarted", "a-st", old, project_id="p1", workflow_instance_id="wf-st")
    assert run(embedded, "publish", "-", env=env, input=line).returncode == 0
    with (tmp_path / "serve.log").open("w") as sink:
        serve = subprocess.Popen([AUDITREC, "serve"], env=env, stdout=sink, stderr=sink)
        try:
            eventually_sync(
                lambda: run(embedded, "status", "--no-probe", "a-st", env=env).returncode,
                until=lambda rc: rc == 0,
                timeout=30,
            )
            # when a status read waits on its probe and the serve stops
            started = time.monotonic()
            status = subprocess.Popen(
                [AUDITREC, "status", "a-st"], env=env, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            time.sleep(3.0)  # on purpose: the read reaches serve (nothing outside shows it)
            serve.send_signal(signal.SIGTERM)
            _, said = status.communicate(timeout=60)
            took = time.monotonic() - started
        finally:
            if serve.poll() is None:
                serve.kill()
            serve.wait(timeout=30)

    # then it says so at once (not after its 30 s wait), and fails
    assert "went away while this read waited" in said
    assert status.returncode == 1 and took < 20
