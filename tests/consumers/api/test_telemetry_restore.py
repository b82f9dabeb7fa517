"""Telemetry and operator restores: PostHog hears of an audit's reconciliation failure once.
A reconciler failure restored and decided again is not sent a second time; an operator's
failure (never sent) restored and then failed by the reconciler is sent, with the facts the
restore carried."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from consumers.cli.assembly import Service
from consumers.operations.actions import Actions
from consumers.operations.backends import Backends
from consumers.operations.service import Operations
from tests.consumers.api.conftest import CaptureServer, as_written, envelope, started
from tests.consumers.api.test_telemetry import OOM, backends, step_until, telemetry

__all__ = ["backends"]  # the fixture, from the telemetry tests


def errored(audit_id: str, at: datetime) -> dict[str, object]:
    return envelope(
        "WorkflowStatusObserved",
        audit_id,
        {
            "workflow_instance_id": f"wf-{audit_id}",
            "status": "errored",
            "error": OOM,
            "trigger": "watchdog",
            "observed_at": at.isoformat(),
        },
        event_id=str(uuid.uuid4()),
    )


async def publish_and_drain(backends: Backends, *raw: dict[str, object]) -> None:
    if raw:
        await Operations(backends).publish(as_written(list(raw)))
    async with Service(backends, ["projector", "reconciler"]) as service:
        assert await service.drain(timeout=20)


async def test_a_restored_audit_is_reported_once(
    backends: Backends, capture: CaptureServer
) -> None:
    now = datetime.now(UTC)
    actions = Actions(Operations(backends), "ops")
    # given one audit the reconciler failed, one an operator failed
    await publish_and_drain(
        backends,
        started("by-reconciler", started_by_user_id="u-1"),
        errored("by-reconciler", now),
        started("by-operator", started_by_user_id="u-2", organization_id="org-2"),
    )
    await actions.fail("by-operator", "deploy_reset", "stuck")
    await publish_and_drain(backends)

    # when both are restored and the reconciler fails each again
    await actions.restore("by-reconciler", "retry")
    await actions.restore("by-operator", "retry")
    await publish_and_drain(backends)
    later = now + timedelta(minutes=1)
    await publish_and_drain(
        backends, errored("by-reconciler", later), errored("by-operator", later)
    )
    failed = [await backends.store.audits.get(a) for a in ("by-reconciler", "by-operator")]
    assert [(r.status, r.state.failed_by) for r in failed if r] == [("failed", "reconciler")] * 2

    # then PostHog got the first reconciler failure of each audit, and no second one
    async with telemetry(backends) as t:
        await step_until(t, lambda: len(capture.delivered()) >= 2 and not t.pending)
        assert await t.idle()
    events = capture.delivered()
    assert sorted(e["properties"]["audit_id"] for e in events) == ["by-operator", "by-reconciler"]
    resumed = next(e for e in events if e["properties"]["audit_id"] == "by-operator")
    assert resumed["distinct_id"] == "u-2"
    assert resumed["properties"]["project_id"] == "proj-by-operator"
    assert resumed["properties"]["$groups"] == {"organization": "org-2"}
