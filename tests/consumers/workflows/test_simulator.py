"""The Workflows API simulator, exercised over real HTTP."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from consumers.workflows.simulator.server import STATUSES, Simulator, SimulatorServer
from tests.eventually import eventually, eventually_sync

ACC = "acc-1"


def instance_url(base: str, instance_id: str, workflow: str = "site-audit") -> str:
    segment = quote(instance_id, safe="")
    if segment in (".", ".."):  # httpx would normalise a literal dot segment away
        segment = segment.replace(".", "%2E")
    return f"{base}/accounts/{ACC}/workflows/{workflow}/instances/{segment}"


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5) as client:
        yield client


# --- the API shape -----------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["/client/v4", ""])
def test_get_instance_answers_in_the_cloudflare_envelope(
    simulator: SimulatorServer, http: httpx.Client, prefix: str
) -> None:
    end = datetime(2026, 11, 30, 8, 5, tzinfo=UTC)
    simulator.sim.set_instance(
        "i-1", "errored", error={"name": "WorkflowTimeoutError", "message": "timed out"}, end=end
    )
    r = http.get(instance_url(simulator.root_url + prefix, "i-1") + "?simple=true")
    assert r.status_code == 200
    body = r.json()
    assert (body["success"], body["errors"], body["messages"]) == (True, [], [])
    result = body["result"]
    assert set(result) == {
        "status", "error", "output", "params", "queued", "start", "end", "success", "trigger",
        "versionId", "step_count", "steps",
    }  # fmt: skip
    assert result["status"] == "errored"
    assert result["error"] == {"name": "WorkflowTimeoutError", "message": "timed out"}
    assert result["end"] == "2026-11-30T08:05:00.000Z"
    assert result["trigger"] == {"source": "api"}
    assert result["success"] is False


@pytest.mark.parametrize("status", STATUSES)
def test_every_status_round_trips_with_derived_timestamps(
    simulator: SimulatorServer, http: httpx.Client, status: str
) -> None:
    simulator.sim.set_instance("i", status)
    result = http.get(instance_url(simulator.url, "i")).json()["result"]
    assert result["status"] == status
    assert (result["start"] is None) == (status == "queued")
    assert (result["end"] is not None) == (status in {"complete", "errored", "terminated"})


@pytest.mark.parametrize(
    "instance_id",
    ["*/30 * * * *-1786001400000", "a/b", "with space", "100%", "é?#&+", "..", "instances"],
)
def test_an_encoded_id_is_exactly_one_path_segment(
    simulator: SimulatorServer, http: httpx.Client, instance_id: str
) -> None:
    simulator.sim.set_instance(instance_id, "running")
    r = http.get(instance_url(simulator.url, instance_id))
    assert r.status_code == 200, r.text
    assert r.json()["result"]["status"] == "running"
    assert simulator.sim.requests_for(instance_id) == 1


def test_an_unencoded_slash_does_not_reach_the_instance(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    simulator.sim.set_instance("a/b", "running")
    r = http.get(f"{simulator.url}/accounts/{ACC}/workflows/site-audit/instances/a/b")
    assert r.status_code == 404
    assert r.json()["errors"][0]["code"] == 7000
    assert simulator.sim.requests_for("a/b") == 0


def test_unknown_instance_is_a_structured_404(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    r = http.get(instance_url(simulator.url, "never-created"))
    assert r.status_code == 404
    assert r.json() == {
        "success": False, "messages": [], "result": None,
        "errors": [{"code": 10400, "message": "workflows.api.error.instance.not_found"}],
    }  # fmt: skip


def test_unknown_workflow_is_10200_until_created(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    r = http.get(instance_url(simulator.url, "i", workflow="other"))
    assert r.status_code == 404
    assert r.json()["errors"] == [
        {"code": 10200, "message": "workflows.api.error.workflow.not_found"}
    ]
    assert http.put(f"{simulator.root_url}/_sim/workflows/other").status_code == 200
    r = http.get(instance_url(simulator.url, "i", workflow="other"))
    assert r.json()["errors"][0]["code"] == 10400
    simulator.sim.set_instance("i", "running", workflow="third")  # creates the workflow too
    assert http.get(instance_url(simulator.url, "i", workflow="third")).status_code == 200


def test_a_configured_token_is_required_on_the_api_and_the_control_api(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    simulator.sim.token = "right-token"
    simulator.sim.set_instance("i", "running")
    url = instance_url(simulator.url, "i")
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "right-token"}):
        r = http.get(url, headers=headers)
        assert r.status_code == 403
        assert r.json()["errors"] == [{"code": 10000, "message": "Authentication error"}]
    assert http.get(url, headers={"Authorization": "Bearer right-token"}).status_code == 200
    stats = f"{simulator.root_url}/_sim/stats"
    assert http.get(stats).status_code == 401
    assert http.get(stats, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert http.get(stats, headers={"Authorization": "Bearer right-token"}).json()["total"] == 4


def test_get_workflow_counts_instances_per_status(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    for i, status in enumerate(["running", "running", "complete"]):
        simulator.sim.set_instance(f"i{i}", status)
    r = http.get(f"{simulator.url}/accounts/{ACC}/workflows/site-audit")
    assert r.json()["result"]["instances"] == {"running": 2, "complete": 1}


def test_list_instances_filters_by_status_and_pages_with_a_cursor(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    for i in range(5):
        simulator.sim.set_instance(f"run-{i}", "running")
    simulator.sim.set_instance("done", "complete")
    url = f"{simulator.url}/accounts/{ACC}/workflows/site-audit/instances"
    first = http.get(url, params={"status": "running", "per_page": 3}).json()
    assert [i["id"] for i in first["result"]] == ["run-0", "run-1", "run-2"]
    assert first["result_info"]["total_count"] == 5
    cursor = first["result_info"]["cursor"]
    second = http.get(url, params={"status": "running", "per_page": 3, "cursor": cursor}).json()
    assert [i["id"] for i in second["result"]] == ["run-3", "run-4"]
    assert "cursor" not in second["result_info"]
    assert len(http.get(url).json()["result"]) == 6


def test_list_instances_filters_by_creation_date_and_orders_either_way(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    t0 = datetime(2026, 11, 30, 8, tzinfo=UTC)
    for hour in range(4):
        queued = t0 + timedelta(hours=hour)
        simulator.sim.set_instance(f"h{hour}", "running", queued=queued, start=queued)
    url = f"{simulator.url}/accounts/{ACC}/workflows/site-audit/instances"

    def ids(**params: str) -> list[str]:
        response = http.get(url, params=params)
        assert response.status_code == 200, response.text
        return [i["id"] for i in response.json()["result"]]

    assert ids(date_start="2026-11-30T09:00:00") == ["h1", "h2", "h3"]
    assert ids(date_start="2026-11-30T09:00:00Z", date_end="2026-11-30T10:00:00") == ["h1", "h2"]
    assert ids(direction="desc") == ["h3", "h2", "h1", "h0"]
    for bad in (
        {"date_start": "2026-11-30T09:00:00+01:00"},
        {"date_start": "yesterday"},
        {"status": "sleeping"},
        {"direction": "up"},
        {"cursor": "not-ours"},
    ):
        response = http.get(url, params=bad)
        assert response.status_code == 400, bad
        assert response.json()["errors"][0]["code"] == 10021


def test_the_listing_can_be_switched_off_and_takes_faults(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    simulator.sim.set_instance("i-1", "running")
    url = f"{simulator.url}/accounts/{ACC}/workflows/site-audit/instances"
    http.put(f"{simulator.root_url}/_sim/config", json={"latency_ms": 0, "listing": False})
    off = http.get(url)
    assert (off.status_code, off.json()["errors"][0]["code"]) == (404, 7000)
    assert http.get(f"{url}/i-1").status_code == 200  # single gets still answer
    http.put(f"{simulator.root_url}/_sim/config", json={"latency_ms": 0, "listing": True})
    http.put(
        f"{simulator.root_url}/_sim/faults/@instances", json={"kind": "server_error", "times": 1}
    )
    assert http.get(url).status_code == 500
    assert http.get(url).status_code == 200
    assert simulator.sim.requests_for("@instances") == 3


def test_patch_status_pauses_resumes_terminates_and_restarts(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    simulator.sim.set_instance("p/1", "running")
    url = instance_url(simulator.url, "p/1") + "/status"
    expected = {"pause": "paused", "resume": "running", "terminate": "terminated",
                "restart": "running"}  # fmt: skip
    for action, status in expected.items():
        r = http.patch(url, json={"status": action})
        assert r.status_code == 200
        assert r.json()["result"]["status"] == status
        assert simulator.sim.get_instance("p/1")["status"] == status  # type: ignore[index]
        if action == "terminate":
            assert simulator.sim.get_instance("p/1")["end"] is not None  # type: ignore[index]
    assert simulator.sim.get_instance("p/1")["end"] is None  # type: ignore[index]
    assert http.patch(url, json={"status": "explode"}).status_code == 400
    missing = http.patch(instance_url(simulator.url, "nope") + "/status", json={"status": "pause"})
    assert missing.json()["errors"][0]["code"] == 10400


# --- the control API ---------------------------------------------------------------------------


def test_control_api_creates_reads_and_deletes_instances(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    ctl = f"{simulator.root_url}/_sim/workflows/site-audit/instances/{quote('x/y z', safe='')}"
    r = http.put(ctl, json={"status": "errored", "error": "boom", "end": None,
                            "start": "2026-11-30T08:00:00Z"})  # fmt: skip
    assert r.status_code == 200
    assert (r.json()["error"], r.json()["end"], r.json()["start"]) == (
        "boom", None, "2026-11-30T08:00:00.000Z",
    )  # fmt: skip
    assert http.get(ctl).json()["status"] == "errored"
    assert http.get(instance_url(simulator.url, "x/y z")).json()["result"]["error"] == "boom"
    assert http.delete(ctl).status_code == 204
    assert http.delete(ctl).status_code == 404
    assert http.get(instance_url(simulator.url, "x/y z")).status_code == 404
    assert http.put(ctl, json={"status": ""}).status_code == 422
    assert http.put(ctl, json={"status": "running", "bogus": 1}).status_code == 422
    assert http.put(ctl, content=b"not json").status_code == 400


def test_faults_over_http_apply_for_times_requests_then_clear(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    simulator.sim.set_instance("f", "running")
    fault_url = f"{simulator.root_url}/_sim/faults/f"
    assert http.put(fault_url, json={"kind": "server_error", "times": 2}).status_code == 200
    codes = [http.get(instance_url(simulator.url, "f")).status_code for _ in range(3)]
    assert codes == [500, 500, 200]
    http.put(fault_url, json={"kind": "forbidden"})
    assert [http.get(instance_url(simulator.url, "f")).status_code for _ in range(2)] == [403, 403]
    assert http.delete(fault_url).status_code == 204
    assert http.get(instance_url(simulator.url, "f")).status_code == 200
    assert http.put(fault_url, json={"kind": "teapot"}).status_code == 422


@pytest.mark.parametrize(
    ("kind", "status", "code"),
    [("server_error", 500, 10001), ("success_false", 200, 10001), ("forbidden", 403, 10000),
     ("rate_limit", 429, 10100)],
)  # fmt: skip
def test_fault_kinds_answer_like_cloudflare(
    simulator: SimulatorServer, http: httpx.Client, kind: str, status: int, code: int
) -> None:
    simulator.sim.set_instance("f", "running")
    simulator.sim.set_fault("f", kind)  # type: ignore[arg-type]
    r = http.get(instance_url(simulator.url, "f"))
    assert r.status_code == status
    assert r.json()["success"] is False
    assert r.json()["errors"][0]["code"] == code
    if kind == "success_false":
        assert r.json()["result"]["status"] == "running"


def test_rate_limit_fault_sends_retry_after_and_ratelimit_headers(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    simulator.sim.set_fault("f", "rate_limit", retry_after=30)
    r = http.get(instance_url(simulator.url, "f"))
    assert (r.status_code, r.headers["retry-after"]) == (429, "30")
    assert r.headers["ratelimit"] == '"default";r=0;t=30'
    simulator.sim.set_fault("f", "rate_limit")
    assert "retry-after" not in http.get(instance_url(simulator.url, "f")).headers


def test_malformed_and_custom_faults(simulator: SimulatorServer, http: httpx.Client) -> None:
    simulator.sim.set_fault("m", "malformed")
    r = http.get(instance_url(simulator.url, "m"))
    assert r.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        r.json()
    simulator.sim.set_fault("c", "custom", http_status=418, body="teapot", headers={"x-a": "1"})
    r = http.get(instance_url(simulator.url, "c"))
    assert (r.status_code, r.text, r.headers["x-a"]) == (418, "teapot", "1")


def test_latency_fault_and_global_latency_delay_answers(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    simulator.sim.set_instance("slow", "running")
    simulator.sim.set_fault("slow", "latency", latency_ms=150, times=1)
    t0 = time.monotonic()
    assert http.get(instance_url(simulator.url, "slow")).status_code == 200
    assert time.monotonic() - t0 >= 0.15
    t0 = time.monotonic()
    http.get(instance_url(simulator.url, "slow"))
    assert time.monotonic() - t0 < 0.15
    config = http.put(f"{simulator.root_url}/_sim/config", json={"latency_ms": 120})
    assert config.json() == {"latency_ms": 120, "listing": True}
    t0 = time.monotonic()
    http.get(instance_url(simulator.url, "slow"))
    assert time.monotonic() - t0 >= 0.12


async def test_stats_track_requests_and_max_in_flight(simulator: SimulatorServer) -> None:
    simulator.sim.latency_ms = 100
    async with httpx.AsyncClient(timeout=5) as client:
        await asyncio.gather(*(client.get(instance_url(simulator.url, f"i{n % 2}"))
                               for n in range(6)))  # fmt: skip
        stats = (await client.get(f"{simulator.root_url}/_sim/stats")).json()
        assert stats == {"total": 6, "by_instance": {"i0": 3, "i1": 3}, "in_flight": 0,
                         "max_in_flight": 6, "terminates": {}}  # fmt: skip
        assert (await client.post(f"{simulator.root_url}/_sim/reset")).status_code == 200
        stats = (await client.get(f"{simulator.root_url}/_sim/stats")).json()
    assert stats == {"total": 0, "by_instance": {}, "in_flight": 0, "max_in_flight": 0,
                     "terminates": {}}  # fmt: skip
    assert simulator.sim.latency_ms == 0


def test_seed_document_loads_workflows_instances_and_faults() -> None:
    sim = Simulator()
    sim.load_seed({
        "workflows": ["empty-one"], "latency_ms": 5,
        "instances": [{"id": "a", "status": "complete", "end": None},
                      {"workflow": "other", "id": "b", "status": "queued"}],
        "faults": [{"id": "a", "kind": "server_error", "times": 1}],
    })  # fmt: skip
    assert sim.get_instance("a") is not None
    assert sim.get_instance("a")["end"] is None  # type: ignore[index]
    assert sim.get_instance("b", workflow="other")["start"] is None  # type: ignore[index]
    assert sim.latency_ms == 5
    with pytest.raises(ValueError):
        sim.load_seed({"instances": [{"id": "x"}]})


# --- running it --------------------------------------------------------------------------------


def test_server_starts_and_stops_fast_and_idempotently() -> None:
    t0 = time.monotonic()
    server = SimulatorServer()
    server.start()
    server.start()
    url = server.url
    assert url.startswith("http://127.0.0.1:") and url.endswith("/client/v4")
    assert httpx.get(instance_url(url, "x")).status_code == 404
    server.stop()
    server.stop()
    assert time.monotonic() - t0 < 1.0
    with pytest.raises(httpx.ConnectError):
        httpx.get(instance_url(url, "x"))


async def test_server_works_as_async_context_manager() -> None:
    sim = Simulator()
    sim.set_instance("a", "paused")
    async with SimulatorServer(sim) as server, httpx.AsyncClient() as client:
        r = await client.get(instance_url(server.url, "a"))
        assert r.json()["result"]["status"] == "paused"
        assert server.sim is sim


def test_run_simulator_serves_a_seed_in_the_foreground(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    seed = tmp_path / "seed.json"
    seed.write_text(json.dumps({"instances": [{"id": "*/5 * * * *-1", "status": "running"}]}))
    code = ("from consumers.workflows.simulator.server import run_simulator; "
            f"run_simulator('127.0.0.1', {port}, 'tok', {str(seed)!r})")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        url = instance_url(f"http://127.0.0.1:{port}/client/v4", "*/5 * * * *-1")

        def answered() -> httpx.Response:
            try:
                return httpx.get(url, headers={"Authorization": "Bearer tok"})
            except httpx.ConnectError as exc:
                raise AssertionError(f"not listening yet: {exc}") from exc

        r = eventually_sync(answered, interval=0.05, message="the simulator to come up")
        assert r.json()["result"]["status"] == "running"
        assert httpx.get(url).status_code == 403
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=5)
    assert f"http://127.0.0.1:{port}/client/v4" in out.decode()


async def test_a_client_that_gives_up_does_not_stay_in_flight(simulator: SimulatorServer) -> None:
    simulator.sim.set_fault("slow", "latency", latency_ms=3000)
    async with httpx.AsyncClient(timeout=0.1) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.get(instance_url(simulator.url, "slow"))
    # the server thread notices the disconnect within milliseconds
    await eventually(
        lambda: simulator.sim.stats()["in_flight"],
        until=lambda n: n == 0,
        timeout=1.0,
        interval=0.01,
        message="the abandoned request to leave in_flight",
    )


def test_the_seed_example_in_the_help_loads() -> None:
    from click.testing import CliRunner

    from consumers.cli.main import main

    text = CliRunner().invoke(main, ["simulate-workflows", "--help"]).output
    example = text.split("every key is optional:")[1].split("Statuses:")[0]
    sim = Simulator()
    sim.load_seed(json.loads(example))
    assert sim.get_instance("wf-1") is not None
    assert sim.get_instance("wf-1")["error"]["message"] == "Worker exceeded memory limit"  # type: ignore[index]
    assert sim.latency_ms == 50 and sim.listing is True


# --- steps, terminations, several workflows ----------------------------------------------------


def test_an_instance_reports_the_step_it_is_at_unless_asked_simply(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    # given an instance whose step "fetch" failed 3 times and tries a 4th time
    ctl = f"{simulator.root_url}/_sim/workflows/site-audit/instances/i-1"
    error = {"name": "Error", "message": "fetch failed"}
    step = {"name": "fetch", "attempts": 4, "error": error, "started_at": "2026-11-30T08:00:00Z"}
    assert http.put(ctl, json={"status": "running", "step": step}).status_code == 200

    # when it is read in full
    result = http.get(instance_url(simulator.url, "i-1")).json()["result"]

    # then it carries one running step with its attempts in Cloudflare's shape
    assert result["step_count"] == 1
    (entry,) = result["steps"]
    assert {k: entry[k] for k in ("type", "name", "start", "end", "success")} == {
        "type": "step", "name": "fetch", "start": "2026-11-30T08:00:00.000Z", "end": None,
        "success": None,
    }  # fmt: skip
    attempts = entry["attempts"]
    assert [a["error"] for a in attempts] == [error, error, error, None]
    assert [a["success"] for a in attempts] == [False, False, False, None]
    assert attempts[-1]["end"] is None and attempts[0]["end"] == "2026-11-30T08:00:01.000Z"
    assert set(entry) == {"type", "name", "start", "end", "success", "attempts", "config",
                          "output"}  # fmt: skip
    # and ?simple=true leaves the steps out
    simple = http.get(instance_url(simulator.url, "i-1") + "?simple=true").json()["result"]
    assert (simple["steps"], simple["step_count"]) == ([], 0)


@pytest.mark.parametrize(
    ("status", "types", "success", "last_error"),
    [
        ("waiting", ["step", "sleep"], True, None),
        ("complete", ["step"], True, None),
        ("errored", ["step"], False, "boom"),
        ("rollingBack", ["step"], None, None),
    ],
)
def test_the_step_follows_the_instance_status(
    simulator: SimulatorServer,
    http: httpx.Client,
    status: str,
    types: list[str],
    success: bool | None,
    last_error: str | None,
) -> None:
    simulator.sim.set_instance(
        "i-1", status, step={"name": "crawl", "attempts": 2, "error": "boom"}
    )
    steps = http.get(instance_url(simulator.url, "i-1")).json()["result"]["steps"]
    assert [s["type"] for s in steps] == types
    assert steps[0]["success"] is success
    assert (steps[0]["end"] is None) is (success is None)
    errors = [a["error"] for a in steps[0]["attempts"]]
    boom = {"name": "Error", "message": "boom"}
    assert errors[0] == boom
    assert errors[1] == (boom if last_error else None)


def test_raw_steps_are_given_as_they_are_and_a_restart_clears_them(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    ctl = f"{simulator.root_url}/_sim/workflows/site-audit/instances/i-1"
    raw = [{"type": "step", "name": 7}, "nonsense"]
    assert http.put(ctl, json={"status": "running", "steps": raw}).status_code == 200
    assert http.get(instance_url(simulator.url, "i-1")).json()["result"]["steps"] == raw
    http.patch(instance_url(simulator.url, "i-1") + "/status", json={"status": "restart"})
    assert http.get(instance_url(simulator.url, "i-1")).json()["result"]["steps"] == []
    assert http.put(ctl, json={"status": "running", "step": {"name": ""}}).status_code == 422


@pytest.mark.parametrize("status", ["complete", "errored", "terminated"])
def test_terminating_an_ended_instance_answers_409_and_changes_nothing(
    simulator: SimulatorServer, http: httpx.Client, status: str
) -> None:
    simulator.sim.add_queue("q")
    simulator.sim.set_instance("i-1", status)
    before = simulator.sim.get_instance("i-1")
    published = simulator.sim.queue_stats("q")["published"]

    r = http.patch(instance_url(simulator.url, "i-1") + "/status", json={"status": "terminate"})

    assert r.status_code == 409
    assert r.json()["success"] is False
    assert r.json()["errors"] == [
        {"code": 10409, "message": "workflows.api.error.instance.already_finished"}
    ]
    assert r.json()["result"] == {"status": status}
    assert simulator.sim.get_instance("i-1") == before
    assert simulator.sim.queue_stats("q")["published"] == published
    view = http.get(f"{simulator.root_url}/_sim/workflows/site-audit/instances/i-1").json()
    assert (view["status"], view["patches"], view["terminations"]) == (
        status, {"terminate": 1}, 0
    )  # fmt: skip


def test_status_patches_are_counted_per_instance(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    simulator.sim.set_instance("i-1", "running")
    url = instance_url(simulator.url, "i-1") + "/status"
    for action in ("pause", "terminate", "terminate", "restart", "terminate"):
        http.patch(url, json={"status": action})
    view = simulator.sim.instance_view("i-1")
    assert view is not None
    assert view["patches"] == {"pause": 1, "terminate": 3, "restart": 1}
    assert (view["terminations"], view["status"]) == (2, "terminated")
    # the simulator-wide count outlives the instance
    simulator.sim.delete_instance("i-1")
    http.patch(url, json={"status": "terminate"})  # 10400: counted on arrival only
    assert simulator.sim.terminates_for("i-1") == 3
    assert http.get(f"{simulator.root_url}/_sim/stats").json()["terminates"] == {"i-1": 3}


def test_a_deleted_instance_is_not_found_and_not_listed(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    simulator.sim.set_instance("i-1", "running")
    simulator.sim.set_instance("i-2", "running")
    assert http.delete(f"{simulator.root_url}/_sim/workflows/site-audit/instances/i-1").is_success
    r = http.get(instance_url(simulator.url, "i-1"))
    assert (r.status_code, r.json()["errors"][0]["code"]) == (404, 10400)
    listed = http.get(f"{simulator.url}/accounts/{ACC}/workflows/site-audit/instances").json()
    assert [i["id"] for i in listed["result"]] == ["i-2"]


def test_rolling_back_is_a_status_that_can_be_set_read_and_listed(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    ctl = f"{simulator.root_url}/_sim/workflows/site-audit/instances/i-1"
    assert http.put(ctl, json={"status": "rollingBack"}).status_code == 200
    assert http.get(instance_url(simulator.url, "i-1")).json()["result"]["status"] == "rollingBack"
    url = f"{simulator.url}/accounts/{ACC}/workflows/site-audit/instances?status=rollingBack"
    assert [(i["id"], i["status"]) for i in http.get(url).json()["result"]] == [
        ("i-1", "rollingBack")
    ]


def test_each_workflow_answers_for_its_own_instances(
    simulator: SimulatorServer, http: httpx.Client
) -> None:
    # given one id in two workflows, and a queue subscribed to both
    simulator.sim.set_instance("same", "running", workflow="site-audit")
    simulator.sim.set_instance("same", "paused", workflow="crawl")
    simulator.sim.set_instance("only-b", "running", workflow="crawl")
    simulator.sim.add_queue("q")

    # then each workflow reads, lists and terminates its own
    def status(workflow: str, iid: str) -> object:
        r = http.get(instance_url(simulator.url, iid, workflow))
        return r.json()["result"]["status"] if r.is_success else r.json()["errors"][0]["code"]

    assert (status("site-audit", "same"), status("crawl", "same")) == ("running", "paused")
    assert status("site-audit", "only-b") == 10400
    listing = f"{simulator.url}/accounts/{ACC}/workflows/crawl/instances"
    assert sorted(i["id"] for i in http.get(listing).json()["result"]) == ["only-b", "same"]
    assert all(i["workflow_id"] == "crawl" for i in http.get(listing).json()["result"])
    r = http.patch(instance_url(simulator.url, "same", "crawl") + "/status",
                   json={"status": "terminate"})  # fmt: skip
    assert r.status_code == 200
    assert (status("site-audit", "same"), status("crawl", "same")) == ("running", "terminated")
    (message,) = simulator.sim.queue_stats("q")["messages"]
    body = json.loads(message["body"])
    assert (body["source"]["workflowName"], body["payload"]["instanceId"]) == ("crawl", "same")
    assert body["type"] == "cf.workflows.workflow.instance.terminated"


def test_a_seed_gives_an_instance_its_step() -> None:
    sim = Simulator()
    step = {"name": "crawl", "attempts": 2, "error": "boom"}
    sim.load_seed({"instances": [{"id": "a", "status": "running", "step": step}]})
    (entry,) = sim.get_instance("a")["steps"]  # type: ignore[index]
    assert (entry["name"], len(entry["attempts"]), entry["end"]) == ("crawl", 2, None)
