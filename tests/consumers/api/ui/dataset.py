"""The console tests' known data set: ten audits whose figures after one sweep are known, and a
poison record for the dead letters."""

from __future__ import annotations

import json
import subprocess
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from consumers.eventlog.factory import open_event_log
from consumers.eventlog.port import OutRecord, Topics
from consumers.workflows.simulator.server import SimulatorServer
from tests.consumers.api.ui.conftest import Serve
from tests.e2e.test_cli_e2e import AUDITREC, envelope
from tests.eventually import eventually_sync

__all__ = ["LOST", "append_poison", "publish_known_data_set"]

LOST = [f"a-lost-{i}" for i in range(4)]


def publish_known_data_set(serve: Serve, simulator: SimulatorServer) -> None:
    """Ten audits; after one sweep: 6 running (4 of them held by the brake), 3 failed in the
    last 24 h (oom and workflow_terminated found by the watchdog, db_error by the workflow),
    1 completed; 5 running past the stale threshold."""
    now = datetime.now(UTC)
    old = now - timedelta(hours=2)
    sim = simulator.sim
    sim.set_instance(
        "wf-oom", "errored", error={"name": "Error", "message": "Worker exceeded memory limit"}
    )
    sim.set_instance("wf-term", "terminated")
    sim.set_instance("wf-stuck", "running")
    lines = [
        envelope("AuditStarted", "a-oom", old, project_id="p1", workflow_instance_id="wf-oom"),
        envelope("AuditStarted", "a-term", old, project_id="p1", workflow_instance_id="wf-term"),
        envelope(
            "AuditStarted",
            "a-stuck",
            now - timedelta(hours=3),
            project_id="p2",
            workflow_instance_id="wf-stuck",
        ),
        *(
            envelope("AuditStarted", a, old, project_id="p2", workflow_instance_id=f"wf-{a}")
            for a in LOST
        ),
        envelope(
            "AuditStarted",
            "a-young",
            now - timedelta(minutes=2),
            project_id="p1",
            workflow_instance_id="wf-young",
        ),
        envelope("AuditStarted", "a-done", old, project_id="p1", workflow_instance_id="wf-done"),
        envelope("AuditCompleted", "a-done", old + timedelta(minutes=30)),
        envelope("AuditStarted", "a-d1", old, project_id="p1", workflow_instance_id="wf-d1"),
        envelope(
            "AuditFailed",
            "a-d1",
            old + timedelta(minutes=5),
            error_code="db_error",
            error_detail="D1_ERROR",
            failed_by="workflow",
        ),
    ]
    published = subprocess.run(
        [AUDITREC, "publish", "-"],
        env=serve.env,
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert published.returncode == 0, published.stderr

    def projected() -> list[dict[str, Any]]:
        out = subprocess.run(
            [AUDITREC, "audits", "--json", "--limit", "100"],
            env=serve.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        rows: list[dict[str, Any]] = json.loads(out.stdout)
        return rows

    eventually_sync(
        projected,
        until=lambda rows: len(rows) == 10,
        timeout=60,
        interval=0.3,
        message="the 10 audits to be projected",
    )
    swept = subprocess.run(
        [AUDITREC, "sweep", "--json"], env=serve.env, capture_output=True, text=True, timeout=180
    )
    # not done (exit 1): the brake held the four lost instances' failures
    assert swept.returncode == 1, swept.stderr + serve.log.read_text()[-2000:]
    assert "the mass-failure brake held 4 decision(s)" in swept.stderr, swept.stderr
    summary = json.loads(swept.stdout)
    assert summary["failed"] == {"oom": 1, "workflow_terminated": 1}, summary
    assert summary["held"] == 4, summary


async def append_poison(serve: Serve) -> None:
    """An envelope with a field no event has, straight onto the log (``publish`` would refuse
    it): the consumers set it aside as a dead letter."""
    body = {
        "event_id": str(uuid.uuid4()),
        "type": "AuditStarted",
        "schema_version": 1,
        "audit_id": "a-poison",
        "occurred_at": datetime.now(UTC).isoformat(),
        "producer": "crawler",
        "data": {"project_id": "p1", "colour": "blue"},
    }
    topics = Topics(serve.env["AUDITREC_TOPIC_PREFIX"])
    log = open_event_log(serve.env["AUDITREC_EVENT_LOG_URL"], topics)
    await log.start()
    try:
        await log.append([OutRecord(topics.lifecycle, "a-poison", json.dumps(body).encode())])
    finally:
        await log.stop()
