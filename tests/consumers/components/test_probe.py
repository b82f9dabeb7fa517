"""The probe on each backend pair, asking the Workflows simulator over real HTTP: one API call
per instance and batch, stale requests dropped, and one observation per request that points
back at it."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from consumers.components.probe import PRODUCER, Probe
from consumers.workflows.client import WorkflowsClient
from consumers.workflows.ratelimit import ON_DEMAND, SHARE_SPENT, WATCHDOG, SharedRateLimit
from consumers.workflows.simulator.server import SimulatorServer
from statemachine.errors import WorkflowsApiError
from statemachine.events import (
    ProbeFailureReason,
    Trigger,
    WorkflowProbeFailed,
    WorkflowStatusObserved,
    derived_id,
)
from tests.clock import FakeClock
from tests.contracts.projection_store import at
from tests.eventually import eventually
from tests.pipeline import Pipeline, append, lifecycle_events, probe_request, run_until_idle

NOW = at(60)


def probe(pipeline: Pipeline, client: WorkflowsClient, **options: object) -> Probe:
    return Probe(pipeline.log, client, clock=lambda: NOW, **options)  # type: ignore[arg-type]


async def test_requests_for_one_instance_in_a_batch_share_one_api_call(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    # given three requests about one instance (watchdog, on demand, manual) and one about another
    simulator.sim.set_instance("wf-1", "running")
    simulator.sim.set_instance("wf-2", "paused")
    triggers = [Trigger.WATCHDOG, Trigger.ON_DEMAND, Trigger.MANUAL]
    requests = [probe_request("a-1", "wf-1", NOW, trigger) for trigger in triggers]
    requests.append(probe_request("a-2", "wf-2", NOW))
    await append(pipeline.log, pipeline.topics.probe_requests, requests)

    # when the probe handles them
    async with probe(pipeline, client) as component:
        await run_until_idle(component)

    # then the API was asked once per instance, and every request got its own observation
    assert simulator.sim.stats()["by_instance"] == {"wf-1": 1, "wf-2": 1}
    observed = await lifecycle_events(pipeline.log, at_least=4)
    by_cause = {e.causation_id: e for e in observed}
    assert set(by_cause) == {r.event_id for r in requests}
    for request in requests:
        event = by_cause[request.event_id]
        assert isinstance(event, WorkflowStatusObserved)
        assert event.event_id == derived_id(request.event_id, "probe-observation")
        assert event.data.trigger == request.data.trigger
    assert [by_cause[r.event_id].data.status for r in requests] == [  # type: ignore[union-attr]
        "running", "running", "running", "paused",
    ]  # fmt: skip
    assert component.probed == 4


async def test_requests_older_than_the_expiry_are_dropped_without_a_call(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    # given a request from 11 minutes ago and one from a minute ago, with a 10 minute expiry
    simulator.sim.set_instance("wf-old", "errored")
    simulator.sim.set_instance("wf-new", "running")
    old = probe_request("a-old", "wf-old", NOW - timedelta(minutes=11))
    new = probe_request("a-new", "wf-new", NOW - timedelta(minutes=1))
    await append(pipeline.log, pipeline.topics.probe_requests, [old, new])

    # when the probe handles them
    async with probe(pipeline, client, max_age=timedelta(minutes=10)) as component:
        await run_until_idle(component)

    # then only the recent one was probed and observed; the old one is consumed all the same
    assert simulator.sim.stats()["by_instance"] == {"wf-new": 1}
    [observed] = await lifecycle_events(pipeline.log, at_least=1)
    assert observed.causation_id == new.event_id
    assert observed.audit_id == "a-new"
    assert component.probed == 1
    assert await component.idle()


async def test_each_answer_is_recorded_as_an_observation_or_a_probe_failure(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    # given requests about a healthy instance, a failing API call, a missing instance and an
    # audit without an instance
    simulator.sim.set_instance("wf-ok", "running")
    simulator.sim.set_instance("wf-broken", "errored")
    simulator.sim.set_fault("wf-broken", "server_error")
    correlation = uuid.uuid4()
    requests = {
        "ok": probe_request("a-ok", "wf-ok", NOW, Trigger.ON_DEMAND, correlation),
        "broken": probe_request("a-broken", "wf-broken", NOW),
        "gone": probe_request("a-gone", "wf-gone", NOW),
        "detached": probe_request("a-detached", None, NOW),
    }
    await append(pipeline.log, pipeline.topics.probe_requests, requests.values())

    # when the probe handles them
    async with probe(pipeline, client) as component:
        await run_until_idle(component)

    # then each request has exactly one answer, caused by it, at the probe's time
    events = await lifecycle_events(pipeline.log, at_least=4)
    answer = {
        name: [e for e in events if e.causation_id == r.event_id] for name, r in requests.items()
    }
    assert all(len(found) == 1 for found in answer.values()), answer
    ok, broken, gone, detached = (answer[n][0] for n in ("ok", "broken", "gone", "detached"))
    for event in (ok, broken, gone, detached):
        assert event.producer == PRODUCER
        assert event.occurred_at == NOW and event.data.observed_at == NOW  # type: ignore[union-attr]
    assert isinstance(ok, WorkflowStatusObserved)
    assert (ok.data.status, ok.data.trigger, ok.correlation_id) == (
        "running", Trigger.ON_DEMAND, correlation,
    )  # fmt: skip
    assert isinstance(broken, WorkflowProbeFailed)
    assert (broken.data.reason, broken.data.http_status) == (ProbeFailureReason.SERVER_ERROR, 500)
    assert broken.data.workflow_instance_id == "wf-broken"
    assert isinstance(gone, WorkflowStatusObserved) and gone.data.status == "not_found"
    assert isinstance(detached, WorkflowStatusObserved)
    assert (detached.data.status, detached.data.workflow_instance_id) == ("not_attached", None)
    # and the audit without an instance cost no API call
    assert simulator.sim.stats()["by_instance"] == {"wf-ok": 1, "wf-broken": 1, "wf-gone": 1}


async def test_a_probe_whose_own_client_stopped_records_nothing_about_the_workflow(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    # given a request, and a probe whose Workflows client has been stopped (a shutdown)
    simulator.sim.set_instance("wf-1", "running")
    await append(pipeline.log, pipeline.topics.probe_requests, [probe_request("a-1", "wf-1", NOW)])
    async with probe(pipeline, client) as component:
        await client.stop()

        # when it handles the request, the step fails: the trouble is ours, not the workflow's
        with pytest.raises(WorkflowsApiError):
            await eventually(component.step, until=lambda handled: handled > 0, timeout=10)

    # then no observation and no probe failure was recorded, and the API was never asked
    assert await lifecycle_events(pipeline.log) == []
    assert simulator.sim.stats()["total"] == 0


async def test_a_request_waits_out_a_short_429_pause_within_its_callers_bound(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    # given the API paused by a 429 for 20 s, and a sweep's request that may wait a minute
    simulator.sim.set_fault("wf-0", "rate_limit", retry_after=20, times=1)
    simulator.sim.set_instance("wf-1", "errored")
    await client.get_instance("wf-0")
    request = probe_request("a-1", "wf-1", NOW)
    bounded = request.model_copy(
        update={"data": request.data.model_copy(update={"answer_by": NOW + timedelta(minutes=1)})}
    )
    await append(pipeline.log, pipeline.topics.probe_requests, [bounded])

    # when the probe handles it
    async with probe(pipeline, client) as component:
        await run_until_idle(component)

    # then it was sent once the pause ended and answered, not given up as rate_limited
    [event] = await lifecycle_events(pipeline.log, at_least=1)
    assert isinstance(event, WorkflowStatusObserved)
    assert event.data.status == "errored"
    assert simulator.sim.requests_for("wf-1") == 1


async def test_status_reads_take_slots_within_their_share_and_a_shared_call_is_the_watchdogs(
    pipeline: Pipeline, simulator: SimulatorServer
) -> None:
    # given a budget of 4 with status reads held to half of it, three reads about three
    # instances, and a read and a watchdog request about a fourth
    for instance in ("wf-1", "wf-2", "wf-3", "wf-w"):
        simulator.sim.set_instance(instance, "running")
    reads = [probe_request(f"a-{i}", f"wf-{i}", NOW, Trigger.ON_DEMAND) for i in (1, 2, 3)]
    shared = [
        probe_request("a-w", "wf-w", NOW, Trigger.ON_DEMAND),
        probe_request("a-w", "wf-w", NOW, Trigger.WATCHDOG),
    ]
    await append(pipeline.log, pipeline.topics.probe_requests, [*reads, *shared])
    clock = FakeClock()
    limiter = SharedRateLimit(
        pipeline.store.budget, "acc", 4, 300.0, shares={ON_DEMAND: 0.5}, sleep=clock.sleep
    )

    # when the probe handles them
    async with (
        WorkflowsClient(
            api_url=simulator.url, account_id="acc", workflow="site-audit", api_token=None,
            max_retries=0, clock=clock, sleep=clock.sleep, limiter=limiter,
        ) as client,
        probe(pipeline, client) as component,
    ):  # fmt: skip
        await run_until_idle(component)

    # then two reads went out and the third was refused for the share without a call, while the
    # call both asked for was the watchdog's, outside the reads' share
    observed = {e.causation_id: e for e in await lifecycle_events(pipeline.log, at_least=5)}
    answers = [observed[r.event_id] for r in reads]
    refused = [a for a in answers if isinstance(a, WorkflowProbeFailed)]
    assert len(refused) == 1
    assert refused[0].data.reason is ProbeFailureReason.RATE_LIMITED
    assert SHARE_SPENT in refused[0].data.detail
    assert all(isinstance(observed[r.event_id], WorkflowStatusObserved) for r in shared)
    assert simulator.sim.stats()["total"] == 3
    spent = {
        spender: await pipeline.store.budget.requests_in_window(
            "acc", datetime.now(UTC), 301.0, spender=spender
        )
        for spender in (ON_DEMAND, WATCHDOG)
    }
    assert spent == {ON_DEMAND: 2, WATCHDOG: 1}
