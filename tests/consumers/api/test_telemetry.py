"""Telemetry over real HTTP: the PostHog SDK's own requests land on a local capture server.

End to end through ``auditrec serve`` (on-demand and watchdog failures, restarts, shadow mode,
PostHog hanging), and the component alone with short timeouts for retries and giving up.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from consumers.cli.assembly import Service
from consumers.components.telemetry import Telemetry
from consumers.eventlog.codec import encode
from consumers.eventlog.factory import open_event_log
from consumers.eventlog.port import Topics
from consumers.operations.backends import Backends
from consumers.operations.service import Operations
from consumers.runtime.metrics import REGISTRY
from consumers.runtime.settings import load_settings
from consumers.workflows.simulator.server import SimulatorServer
from statemachine.events import EVENT_ADAPTER
from tests.eventually import eventually, eventually_sync
from tests.pipeline import read_topic

from .conftest import (
    API_AND_PIPELINE,
    JSON,
    CaptureServer,
    LiveServer,
    as_written,
    envelope,
    publish,
    server_settings,
    started,
    unique,
    wait_for,
)

OOM: dict[str, str | None] = {"name": "Error", "message": "Worker exceeded memory limit."}
EVERYTHING = [*API_AND_PIPELINE, "watchdog", "telemetry"]


def counted(result: str) -> float:
    return REGISTRY.get_sample_value("auditrec_telemetry_total", {"result": result}) or 0.0


def telemetry_settled(live: LiveServer) -> None:
    """Wait until the server's telemetry consumer holds every partition, has read and
    committed the whole lifecycle topic and has nothing left to send: it will send nothing
    more unless new events arrive."""
    component = live.component("telemetry")
    assert live.backends is not None
    backends = live.backends

    async def state() -> dict[str, Any]:
        ends = await backends.log.inspection.end_offsets(backends.topics.lifecycle)
        return {
            "idle": await component.idle(),
            "pending": len(component.pending),
            "uncommitted": sum(ends.values()) - await committed(backends),
        }

    eventually_sync(
        lambda: live.call(state),
        until=lambda s: s["idle"] and s["pending"] == 0 and s["uncommitted"] == 0,
        interval=0.05,
        message="telemetry to settle",
    )


def failure_event(live: LiveServer, audit_id: str) -> dict[str, Any]:
    with live.client() as client:
        steps = client.get(f"/audits/{audit_id}/events").json()["events"]
    [failed] = [s for s in steps if s["type"] == "AuditFailed"]
    return failed  # type: ignore[no-any-return]


def same_instant(a: str, b: str) -> bool:
    return datetime.fromisoformat(a.replace("Z", "+00:00")) == datetime.fromisoformat(
        b.replace("Z", "+00:00")
    )


def test_an_on_demand_failure_sends_one_exact_event_and_a_restart_does_not_resend(
    tmp_path: Path, simulator: SimulatorServer, capture: CaptureServer
) -> None:
    settings = server_settings(
        tmp_path, simulator, posthog_api_key="phc_test_key", posthog_host=capture.url
    )
    audit_id = unique("tele")
    simulator.sim.set_instance(f"wf-{audit_id}", "errored", error=OOM)
    sent_before = counted("sent")

    with LiveServer(EVERYTHING, **settings) as live:
        live.wait_pipeline_live()
        with live.client() as client:
            publish(
                client,
                started(audit_id, organization_id="org-42", started_by_user_id="user-7"),
                envelope(
                    "AuditProgressed",
                    audit_id,
                    {"current_phase": "crawl", "pages_crawled": 40, "pages_total": 120},
                ),
            )
            wait_for(client, audit_id, lambda r: r["version"] == 2)
            body = client.get(f"/audits/{audit_id}").json()
            assert body["status"] == "failed" and body["error_code"] == "oom"
        [event] = capture.wait_delivered(1)
        failed = failure_event(live, audit_id)
        telemetry_settled(live)

    assert event["event"] == "site_audit:complete"
    assert event["path"] == "/batch/"
    assert event["api_key"] == "phc_test_key"
    assert event["distinct_id"] == "user-7"
    assert event["uuid"] == failed["event_id"]
    assert same_instant(event["timestamp"], failed["occurred_at"])
    props = event["properties"]
    assert {k: props[k] for k in (
        "audit_id", "project_id", "status", "reconciled_by", "error_code", "failed_phase",
        "pages_crawled", "pages_total",
    )} == {
        "audit_id": audit_id, "project_id": f"proj-{audit_id}", "status": "failed",
        "reconciled_by": "on_demand", "error_code": "oom", "failed_phase": "crawl",
        "pages_crawled": 40, "pages_total": 120,
    }  # fmt: skip
    assert props["$groups"] == {"organization": "org-42"}
    assert "$process_person_profile" not in props
    assert counted("sent") == sent_before + 1

    attempts = capture.attempts
    with LiveServer(EVERYTHING, **settings) as again:  # same event log and database
        again.wait_pipeline_live()
        telemetry_settled(again)
    assert capture.attempts == attempts
    assert len(capture.delivered()) == 1


def append_to_log(settings: dict[str, Any], *events: dict[str, Any]) -> None:
    """Append envelopes straight to the event log, as another auditrec component would."""

    async def append() -> None:
        topics = Topics(settings["topic_prefix"])
        async with open_event_log(settings["event_log_url"], topics) as log:
            await log.append(
                [encode(topics.lifecycle, EVENT_ADAPTER.validate_python(e)) for e in events]
            )

    asyncio.run(append())


def test_a_watchdog_failure_is_sent_and_failures_the_workflow_reported_are_not(
    tmp_path: Path, simulator: SimulatorServer, capture: CaptureServer
) -> None:
    settings = server_settings(
        tmp_path, simulator, posthog_api_key="phc_test_key", posthog_host=capture.url
    )
    dead, by_workflow, done = unique("dead"), unique("wf-reported"), unique("done")
    simulator.sim.set_instance(f"wf-{dead}", "terminated")
    with LiveServer(EVERYTHING, **settings) as live:
        live.wait_pipeline_live()
        with live.client() as client:
            publish(
                client,
                started(dead, minutes_ago=40, started_by_user_id=None, organization_id=None),
                started(by_workflow, minutes_ago=40),
                envelope(
                    "AuditFailed",
                    by_workflow,
                    {"error_code": "oom", "error_detail": "killed", "failed_by": "workflow"},
                ),
                started(done, minutes_ago=40),
                envelope("AuditCompleted", done, {"pages_crawled": 100}),
            )
            # a reconciler decision on an audit already completed is recorded, not applied
            # (only the reconciler writes those: it goes to the log directly, not via the API)
            append_to_log(
                settings,
                envelope(
                    "AuditFailed",
                    done,
                    {
                        "error_code": "instance_lost",
                        "error_detail": "late",
                        "failed_by": "reconciler",
                        "reconciled_by": "watchdog",
                    },
                    event_id=str(uuid.uuid4()),
                    occurred_at=datetime.now(UTC).isoformat(),
                ),
            )
            # the late decision is recorded (history) but not applied (version stays 2)
            eventually_sync(
                lambda: client.get(f"/audits/{done}/events").json().get("events", []),
                until=lambda events: len(events) >= 3,
                interval=0.05,
                message="the late decision to be recorded",
            )
            assert client.get(f"/audits/{done}?probe=false").json()["version"] == 2
            summary = client.post("/sweep", headers=JSON).json()
            assert summary["failed"] == {"workflow_terminated": 1}
        [event] = capture.wait_delivered(1)
        telemetry_settled(live)

    assert len(capture.delivered()) == 1
    assert event["properties"]["audit_id"] == dead
    assert event["properties"]["reconciled_by"] == "watchdog"
    assert event["properties"]["error_code"] == "workflow_terminated"
    # no user: the audit id, and no person profile; no organization: no group
    assert event["distinct_id"] == dead
    assert event["properties"]["$process_person_profile"] is False
    assert "$groups" not in event["properties"]


def test_shadow_mode_sends_nothing(
    tmp_path: Path, simulator: SimulatorServer, capture: CaptureServer
) -> None:
    settings = server_settings(
        tmp_path, simulator, posthog_api_key="k", posthog_host=capture.url, mode="shadow"
    )
    audit_id = unique("shadow")
    simulator.sim.set_instance(f"wf-{audit_id}", "errored", error=OOM)
    with LiveServer(EVERYTHING, **settings) as live:
        live.wait_pipeline_live()
        with live.client() as client:
            publish(client, started(audit_id))
            wait_for(client, audit_id)
            body = client.get(f"/audits/{audit_id}").json()
            assert body["status"] == "running"
            assert body["reconciliation"]["result"] == "would_fail"
        telemetry_settled(live)
    assert capture.attempts == 0


def test_posthog_hanging_never_delays_reconciliation_and_the_event_follows(
    tmp_path: Path, simulator: SimulatorServer, capture: CaptureServer
) -> None:
    settings = server_settings(tmp_path, simulator, posthog_api_key="k", posthog_host=capture.url)
    first, second = unique("hang"), unique("hang")
    for audit_id in (first, second):
        simulator.sim.set_instance(f"wf-{audit_id}", "errored", error=OOM)
    capture.mode, capture.hang_seconds = "hang", 1.5
    with LiveServer(EVERYTHING, **settings) as live:
        live.wait_pipeline_live()
        with live.client() as client:
            publish(client, started(first), started(second))
            wait_for(client, second)
            for audit_id in (first, second):
                began = time.monotonic()
                assert client.get(f"/audits/{audit_id}").json()["status"] == "failed"
                assert time.monotonic() - began < 3
        eventually_sync(
            lambda: capture.attempts, interval=0.05, message="a first attempt to reach PostHog"
        )
        assert capture.delivered() == []
        capture.mode = "ok"
        events = capture.wait_delivered(2, timeout=20)
        telemetry_settled(live)
    assert sorted(e["properties"]["audit_id"] for e in events) == sorted([first, second])
    assert len(capture.delivered()) == 2


# --- the component alone, with short timeouts ----------------------------------------------


@pytest.fixture
async def backends(tmp_path: Path, capture: CaptureServer) -> AsyncIterator[Backends]:
    settings = load_settings(
        event_log_url=f"sqlite:///{tmp_path}/events.db",
        database_url=f"sqlite:///{tmp_path}/audits.db",
        topic_prefix=f"t{uuid.uuid4().hex[:8]}",
        posthog_api_key="phc_unit",
        posthog_host=capture.url,
    )
    async with Backends(settings) as backends:
        yield backends


async def fail_audits(backends: Backends, *audit_ids: str) -> None:
    """Start each audit and report its workflow errored: the reconciler fails it."""
    now = datetime.now(UTC)
    raw = []
    for audit_id in audit_ids:
        raw.append(started(audit_id))
        raw.append(
            envelope(
                "WorkflowStatusObserved",
                audit_id,
                {
                    "workflow_instance_id": f"wf-{audit_id}",
                    "status": "errored",
                    "error": OOM,
                    "trigger": "watchdog",
                    "observed_at": (now + timedelta(seconds=1)).isoformat(),
                },
            )
        )
    await Operations(backends).publish(as_written(raw))
    async with Service(backends, ["reconciler"]) as service:
        assert await service.drain(timeout=20)


def telemetry(backends: Backends, **options: Any) -> Telemetry:
    t = Telemetry(
        backends.log,
        backends.store,
        backends.settings,
        send_timeout=options.pop("send_timeout", 0.5),
        retry_base=0.05,
        retry_cap=0.2,
        **options,
    )
    t.poll_timeout = 0.05
    return t


async def step_until(t: Telemetry, done: Callable[[], bool], timeout: float = 15) -> None:
    async def stepped() -> bool:
        if not done():
            await t.step()
        return done()

    await eventually(stepped, timeout=timeout, interval=0, message="telemetry stepped until done")


async def committed(backends: Backends) -> int:
    offsets = await backends.log.inspection.group_offsets(
        backends.topics.group(Telemetry.name), backends.topics.lifecycle
    )
    return sum(offsets.values())


async def test_posthog_down_is_retried_then_delivered_once_and_counted(
    backends: Backends, capture: CaptureServer
) -> None:
    await fail_audits(backends, "down-1", "down-2")
    capture.mode = "down"
    retried, sent = counted("retried"), counted("sent")
    async with telemetry(backends) as t:
        await step_until(t, lambda: capture.attempts >= 3)
        assert capture.delivered() == []
        assert counted("retried") >= retried + 3
        assert len(t.pending) == 2
        # offsets stay before the first undelivered event: a restart would retry it
        assert await committed(backends) == t.pending[0].offset
        capture.mode = "ok"
        await step_until(t, lambda: not t.pending)
        assert await t.idle()
    events = capture.delivered()
    assert sorted(e["properties"]["audit_id"] for e in events) == ["down-1", "down-2"]
    assert len({e["uuid"] for e in events}) == 2
    assert counted("sent") == sent + 2
    assert await committed(backends) == sum(
        (await backends.log.inspection.end_offsets(backends.topics.lifecycle)).values()
    )


async def test_a_slow_posthog_times_out_and_is_retried(
    backends: Backends, capture: CaptureServer
) -> None:
    await fail_audits(backends, "slow-1")
    capture.mode, capture.hang_seconds = "hang", 1.0
    async with telemetry(backends, send_timeout=0.2) as t:
        began = time.monotonic()
        await t.step()
        assert time.monotonic() - began < 2.5  # bounded by the send timeout
        assert capture.delivered() == [] and len(t.pending) == 1
        capture.mode = "ok"
        await step_until(t, lambda: not t.pending)
    assert [e["properties"]["audit_id"] for e in capture.delivered()] == ["slow-1"]


async def test_a_restart_does_not_resend_what_was_delivered(
    backends: Backends, capture: CaptureServer
) -> None:
    await fail_audits(backends, "again-1")
    async with telemetry(backends) as t:
        await step_until(t, lambda: t.sent == 1)
    assert len(capture.delivered()) == 1
    attempts = capture.attempts

    async with telemetry(backends) as t2:
        for _ in range(5):
            await t2.step()
        assert await t2.idle()
    assert capture.attempts == attempts

    # Even re-reading the whole log (offsets lost), what was sent is remembered.
    skipped = counted("skipped")
    async with telemetry(backends) as t3:
        assert t3.consumer is not None
        await t3.step()
        t3.consumer.seek((backends.topics.lifecycle, 0), 0)
        t3.partitions.clear()
        t3.keys.clear()  # all it folded, the keys of the failed audit included
        for _ in range(5):
            await t3.step()
    assert capture.attempts == attempts
    assert counted("skipped") == skipped + 1


async def test_an_event_is_given_up_after_max_attempts(
    backends: Backends, capture: CaptureServer
) -> None:
    await fail_audits(backends, "lost-1")
    capture.mode = "down"
    failed = counted("failed")
    async with telemetry(backends, max_attempts=3) as t:
        await step_until(t, lambda: counted("failed") > failed)
        assert t.pending == []
    assert capture.attempts == 3
    assert counted("failed") == failed + 1
    assert await committed(backends) == sum(
        (await backends.log.inspection.end_offsets(backends.topics.lifecycle)).values()
    )


async def test_without_an_api_key_telemetry_cannot_be_built(tmp_path: Path) -> None:
    from statemachine.errors import ConfigError

    settings = load_settings(
        event_log_url=f"sqlite:///{tmp_path}/e.db", database_url=f"sqlite:///{tmp_path}/d.db"
    )
    async with Backends(settings) as backends:
        with pytest.raises(ConfigError, match="POSTHOG_API_KEY"):
            Telemetry(backends.log, backends.store, settings)
        async with Service(backends, ["telemetry"]) as service:
            assert service.components == {}


class _Poisoned(Telemetry):
    """Telemetry that cannot handle one audit's events (as a bug or a hostile event would)."""

    def _take(self, tp: Any, offset: int, event: Any) -> None:
        if event.audit_id == "poison-1":
            raise ValueError("cannot take this one")
        super()._take(tp, offset, event)


async def test_an_event_telemetry_cannot_handle_is_dead_lettered_and_the_rest_are_sent(
    backends: Backends, capture: CaptureServer
) -> None:
    # given two failures, the first of which telemetry cannot handle
    await fail_audits(backends, "poison-1", "fine-1")
    t = _Poisoned(
        backends.log, backends.store, backends.settings, send_timeout=0.5, retry_base=0.05
    )
    t.poll_timeout = 0.05
    async with t:
        await step_until(t, lambda: t.sent == 1)
        assert await t.idle()
    # then the other failure was sent, and each poison record is in the dead-letter topic
    assert [e["properties"]["audit_id"] for e in capture.delivered()] == ["fine-1"]
    dead = [
        json.loads(r.value) for r in await read_topic(backends.log, backends.topics.dead_letter)
    ]
    assert len(dead) == 3  # its start, its observation, its failure
    group = backends.topics.group("telemetry")
    assert all(d["consumer"] == group and "cannot take this one" in d["error"] for d in dead)
    assert {json.loads(d["original"])["audit_id"] for d in dead} == {"poison-1"}
    assert await committed(backends) == sum(
        (await backends.log.inspection.end_offsets(backends.topics.lifecycle)).values()
    )
