"""Bulk discovery on each backend pair, through the real pipeline (watchdog with the workflow's
instance listing → probe against the simulator → reconciler → projector): one tick looks at
every stale audit, asks the API alone only about the instances not listed alive, and ends with
the same outcomes as asking about each audit alone — also when the listing is missing or
fails."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from consumers.runtime.metrics import REGISTRY
from consumers.workflows.client import WorkflowsClient
from consumers.workflows.discovery import Discovery
from consumers.workflows.simulator.server import SimulatorServer
from consumers.workflows.simulator.state import LISTING
from statemachine.events import AuditEvent, AuditFailed, WorkflowStatusObserved
from tests.consumers.components.stack import Stack
from tests.contracts.projection_store import at, started
from tests.pipeline import Pipeline, append, lifecycle_events

ALIVE = {"running": 50, "queued": 4, "paused": 3, "waiting": 3}
DEAD = {  # audit → (what the API says, the failure expected)
    **{f"oom-{i}": ("errored", "oom") for i in range(3)},
    **{f"killed-{i}": ("terminated", "workflow_terminated") for i in range(2)},
    **{f"unfinished-{i}": ("complete", "finalize_lost") for i in range(2)},
    **{f"lost-{i}": (None, "instance_lost") for i in range(3)},
}
PER_PAGE = 10


async def given_stale_audits(pipeline: Pipeline, sim: SimulatorServer) -> list[str]:
    """Running audits started two hours ago: 60 alive instances, one alive instance created
    long before its audit (outside the listing's window), and 10 dead of every kind; the audit
    ids whose instances are not listed alive."""
    events: list[AuditEvent] = []
    for status, count in ALIVE.items():
        for i in range(count):
            events.append(started(f"{status}-{i}", at(0), instance=f"wf-{status}-{i}"))
            sim.sim.set_instance(f"wf-{status}-{i}", status, queued=at(0), start=at(0))
    events.append(started("reused", at(0), instance="wf-reused"))
    sim.sim.set_instance("wf-reused", "running", queued=at(-180), start=at(-180))
    for audit, (status, _) in DEAD.items():
        events.append(started(audit, at(0), instance=f"wf-{audit}"))
        if status is not None:
            error = {"name": "Error", "message": "Worker exceeded memory limit"}
            sim.sim.set_instance(
                f"wf-{audit}",
                status,
                queued=at(0),
                start=at(0),
                end=at(30),
                error=error if status == "errored" else None,
            )
    await append(pipeline.log, pipeline.topics.lifecycle, events)
    return ["reused", *DEAD]


def requests_metric(source: str) -> float:
    labels = {"source": source}
    return REGISTRY.get_sample_value("auditrec_watchdog_probe_requests_total", labels) or 0.0


def listing_pages() -> int:
    """Requests for the listing: each alive status paged through (an empty one is one page)."""
    counts = [ALIVE.get(s, 0) for s in ("running", "queued", "waiting", "paused")] + [0]
    return sum(max(1, math.ceil(n / PER_PAGE)) for n in counts)


@pytest.mark.parametrize("mode", ["listing", "single gets", "no listing endpoint", "listing fails"])
async def test_a_tick_ends_every_dead_audit_like_single_gets_would(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer, mode: str
) -> None:
    # given 61 alive and 10 dead stale audits
    asked_alone = await given_stale_audits(pipeline, simulator)
    if mode == "no listing endpoint":
        simulator.sim.listing = False
    if mode == "listing fails":
        simulator.sim.set_fault(LISTING, "server_error", times=1)
    discovery = None if mode == "single gets" else Discovery(client, limit=1000, per_page=PER_PAGE)

    # when the watchdog ticks once and the pipeline drains
    before = {source: requests_metric(source) for source in ("listing", "instance")}
    ticks = REGISTRY.get_sample_value("auditrec_watchdog_ticks_total", {"result": "ticked"}) or 0
    async with Stack(pipeline, client, batch_limit=100, discovery=discovery) as stack:
        await stack.sweep()
        await stack.watchdog.report()

    # then every dead audit failed with its code, and every alive one still runs
    events = await lifecycle_events(pipeline.log)
    failed = {e.audit_id: e.data.error_code for e in events if isinstance(e, AuditFailed)}
    assert failed == {audit: code for audit, (_, code) in DEAD.items()}
    total = sum(ALIVE.values()) + 1 + len(DEAD)
    assert await pipeline.store.audits.count_by_status() == {
        "running": total - len(DEAD),
        "failed": len(DEAD),
    }

    # and each audit was observed once, the listed ones without a request of their own
    observed = [e for e in events if isinstance(e, WorkflowStatusObserved)]
    assert Counter(e.audit_id for e in observed) == {a: 1 for a in {e.audit_id for e in events}}
    by_instance = simulator.sim.stats()["by_instance"]
    listed = {e.audit_id for e in observed if e.data.source == "listing"}
    # and the metrics say what the tick did, and what the table now holds
    made = {source: requests_metric(source) - before[source] for source in before}
    assert made == {"listing": len(listed), "instance": total - len(listed)}
    assert REGISTRY.get_sample_value("auditrec_watchdog_ticks_total", {"result": "ticked"}) == (
        ticks + 1
    )
    assert REGISTRY.get_sample_value("auditrec_watchdog_tick_candidates") == total
    assert REGISTRY.get_sample_value("auditrec_audits", {"status": "failed"}) == len(DEAD)
    assert REGISTRY.get_sample_value("auditrec_audits_stale_running") == total - len(DEAD)
    if mode == "listing":
        assert by_instance.pop(LISTING) == listing_pages()
        assert set(by_instance) == {f"wf-{a}" for a in asked_alone}
        assert set(by_instance.values()) == {1}
        assert len(listed) == sum(ALIVE.values())
        assert all(e.data.status in ALIVE for e in observed if e.data.source == "listing")
    else:  # every audit asked about alone
        by_instance.pop(LISTING, None)
        assert len(by_instance) == total
        assert listed == set()


async def test_a_tick_without_a_working_listing_looks_at_the_batch_limit_only(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    # given 71 stale audits and an API without the listing
    await given_stale_audits(pipeline, simulator)
    simulator.sim.listing = False

    # when a watchdog with a batch limit of 20 ticks
    discovery = Discovery(client, limit=1000, per_page=PER_PAGE)
    async with Stack(pipeline, client, batch_limit=20, discovery=discovery) as stack:
        await stack.sweep()

    # then it asked about 20 audits, each alone, as it would without a listing
    stats = simulator.sim.stats()["by_instance"]
    assert stats.pop(LISTING) == 1
    assert len(stats) == 20
    observed = [e for e in await lifecycle_events(pipeline.log) if e.type.startswith("Workflow")]
    assert len(observed) == 20
