"""The event subscription with a real ``auditrec serve`` on both backend pairs, the Workflows
simulator's queue over real HTTP: a death the queue reports fails its audit within seconds
(``reconciled_by: subscription``), shown in the console and the metrics; a failing pull is a
``/readyz`` warning until pulls succeed again; and ``serve --only subscriber`` alone appends
the confirmation that a ``serve --only confirmer,reconciler`` answers later, the API and the
projection in a third process."""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from consumers.workflows.simulator.server import SimulatorServer
from tests.conftest import Backend
from tests.e2e.serving import serve, serving
from tests.eventually import eventually_sync

QUEUE = "site-audit-events"
POLL = 0.2  # seconds between looks, the subscriber's and the test's
OOM = {"name": "Error", "message": "Exceeded Memory Limit"}


@pytest.fixture
def env(backend: Backend, simulator: SimulatorServer) -> dict[str, str]:
    control(simulator, "PUT", f"/_sim/queues/{QUEUE}", {"workflows": ["site-audit"]})
    return backend.environ(
        AUDITREC_CLOUDFLARE_API_URL=simulator.url,
        AUDITREC_CLOUDFLARE_ACCOUNT_ID="acct-1",
        AUDITREC_CLOUDFLARE_QUEUE_ID=QUEUE,
        AUDITREC_SUBSCRIPTION_POLL="200ms",
        AUDITREC_LOG_FORMAT="json",
    )


def control(simulator: SimulatorServer, method: str, path: str, body: Any = None) -> Any:
    """A call to the simulator's control API; its JSON answer."""
    answer = httpx.request(method, simulator.root_url + path, json=body, timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()


def instance(simulator: SimulatorServer, instance_id: str, status: str, **body: Any) -> None:
    path = f"/_sim/workflows/site-audit/instances/{instance_id}"
    control(simulator, "PUT", path, {"status": status, **body})


def queue_stats(simulator: SimulatorServer) -> dict[str, Any]:
    stats: dict[str, Any] = control(simulator, "GET", f"/_sim/queues/{QUEUE}")
    return stats


def start_audit(client: httpx.Client, simulator: SimulatorServer) -> tuple[str, str]:
    """A running audit on a running instance, published through the API and projected."""
    audit_id = f"sub-{uuid.uuid4().hex[:10]}"
    instance_id = f"wf-{audit_id}"
    instance(simulator, instance_id, "running")
    started = datetime.now(UTC) - timedelta(minutes=1)
    event = {
        "type": "AuditStarted",
        "audit_id": audit_id,
        "occurred_at": started.isoformat(),
        "producer": "crawler",
        "data": {"project_id": "p-1", "workflow_instance_id": instance_id},
    }
    answer = client.post("/events", json=[event])
    assert answer.status_code == 202, answer.text
    assert audit(client, audit_id)["status"] == "running"
    return audit_id, instance_id


def audit(client: httpx.Client, audit_id: str, until: str = "running") -> dict[str, Any]:
    """The audit from the projection only (no probe on demand), once it has ``until`` status."""

    def read() -> dict[str, Any] | None:
        answer = client.get(f"/audits/{audit_id}", params={"probe": "false"})
        return answer.json() if answer.status_code == 200 else None

    found: dict[str, Any] = eventually_sync(
        read,
        until=lambda a: a is not None and a["status"] == until,
        timeout=30,
        interval=POLL,
        message=f"{audit_id} {until}",
    )
    return found


def waiting(client: httpx.Client) -> str:
    """The console overview's count of confirmations waiting."""
    page = client.get("/ui")
    assert page.status_code == 200, page.text
    found = re.search(r'<b id="confirmations-waiting">([^<]*)</b>', page.text)
    assert found, "no confirmations count in the overview"
    return found.group(1)


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_death_the_queue_reports_fails_its_audit_within_seconds(
    env: dict[str, str], simulator: SimulatorServer, tmp_path: Path
) -> None:
    with (
        serve(env, tmp_path / "serve.log") as url,
        httpx.Client(base_url=url, timeout=10) as client,
    ):
        # given a running audit on a running instance
        audit_id, instance_id = start_audit(client, simulator)

        # when the instance errors
        died = time.monotonic()
        instance(simulator, instance_id, "errored", error=OOM)

        # then the audit is failed from the queue's message, classified, within seconds
        failed = audit(client, audit_id, until="failed")
        took = time.monotonic() - died
        assert failed["reconciled_by"] == "subscription"
        assert failed["error_code"] == "oom"
        assert took < 5, took
        # and every message the instance published (started, errored) is acknowledged
        stats = eventually_sync(
            lambda: queue_stats(simulator),
            until=lambda s: s["acked"] == 2,
            timeout=10,
            interval=POLL,
            message="both messages acknowledged",
        )
        assert (stats["visible"], stats["leased"], stats["pull_errors"]) == (0, 0, 0)

        # and the console shows the queue, with nothing waiting for confirmation
        overview = client.get("/ui").text
        assert "Event subscription" in overview and f"<code>{QUEUE}</code>" in overview
        assert "Confirmations waiting" in overview
        assert eventually_sync(lambda: waiting(client), until=lambda n: n == "0", timeout=10)

        # and the metrics count the messages and the time to detect the death
        metrics = client.get("/metrics").text
        acked = metric(metrics, "auditrec_subscription_messages_total", outcome="acked")
        assert metric(metrics, "auditrec_subscription_messages_total", event="errored") >= 1
        assert acked == 2
        assert metric(metrics, "auditrec_detection_seconds_count") == 1
        detected = metric(metrics, "auditrec_detection_seconds_sum")
        assert 0 < detected < took + 1


def test_a_failing_pull_is_a_readiness_warning_until_pulls_succeed(
    env: dict[str, str], simulator: SimulatorServer, tmp_path: Path
) -> None:
    # given a queue whose pulls answer 503 until told otherwise
    faults = f"/_sim/queues/{QUEUE}/faults"
    control(simulator, "PUT", faults, {"pull_error": {"http_status": 503, "times": None}})
    with (
        serve(env, tmp_path / "serve.log") as url,
        httpx.Client(base_url=url, timeout=10) as client,
    ):

        def readiness() -> tuple[int, list[str]]:
            answer = client.get("/readyz")
            return answer.status_code, answer.json()["warnings"]

        def pull_warnings(warnings: list[str]) -> list[str]:
            return [w for w in warnings if f"the last pull of queue {QUEUE} failed" in w]

        # then /readyz names the failed pull, and stays ready: polling still finds deaths
        code, warnings = eventually_sync(
            readiness, until=lambda r: pull_warnings(r[1]), interval=POLL, message="a warning"
        )
        assert code == 200
        (warning,) = pull_warnings(warnings)
        assert warning.startswith("subscriber: ") and "server_error" in warning
        assert "polling" in warning
        assert queue_stats(simulator)["pull_errors"] >= 1

        # when pulls succeed again, the warning goes
        control(simulator, "PUT", faults, {})
        code, warnings = eventually_sync(
            readiness, until=lambda r: not pull_warnings(r[1]), interval=POLL, timeout=30
        )
        assert code == 200
        assert queue_stats(simulator)["pulls"] >= 1


def test_a_subscriber_alone_appends_the_confirmation_and_a_confirmer_elsewhere_answers_it(
    env: dict[str, str], simulator: SimulatorServer, tmp_path: Path
) -> None:
    # given a serve with the API and the projection, and a running audit
    with (
        serve(env, tmp_path / "api.log", "api", "projector") as url,
        httpx.Client(base_url=url, timeout=10) as client,
    ):
        audit_id, instance_id = start_audit(client, simulator)
        requests_before = simulator.sim.requests_for(instance_id)

        # when a serve that only reads the queue runs, and the instance is terminated
        with without_api(env, tmp_path / "subscriber.log", "subscriber") as subscriber:
            instance(simulator, instance_id, "terminated")

            # then it appends a confirmation that waits for a confirmer, asking nobody yet
            assert eventually_sync(lambda: waiting(client), until=lambda n: n == "1")
            acked = eventually_sync(
                lambda: metric(
                    httpx.get(f"{subscriber}/metrics", timeout=5).text,
                    "auditrec_subscription_messages_total",
                    event="terminated",
                    outcome="acked",
                ),
                until=lambda n: n == 1,
                interval=POLL,
            )
            assert acked == 1
            assert audit(client, audit_id)["status"] == "running"
            assert simulator.sim.requests_for(instance_id) == requests_before

        # when a confirmer (and a reconciler) run in another process
        with without_api(env, tmp_path / "confirmer.log", "confirmer", "reconciler"):
            # then it confirms the death with one request, and the audit fails from it
            failed = audit(client, audit_id, until="failed")
            assert failed["reconciled_by"] == "subscription"
            assert failed["error_code"] == "workflow_terminated"
            assert simulator.sim.requests_for(instance_id) == requests_before + 1
            assert eventually_sync(lambda: waiting(client), until=lambda n: n == "0")
        assert queue_stats(simulator)["acked"] == 2


@contextlib.contextmanager
def without_api(env: dict[str, str], log: Path, *components: str) -> Iterator[str]:
    """``serve --only COMPONENTS`` (no API); yields its metrics endpoint's base URL."""
    only = ",".join(components)
    with serving(
        env, log, "--only", only, ready="/metrics", port_variable="AUDITREC_METRICS_PORT"
    ) as url:
        yield url
