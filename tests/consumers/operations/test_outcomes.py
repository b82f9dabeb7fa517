"""await_outcomes on each backend pair: the outcome of each probe request is found by following
its causation chain (request → observation → decision) through what the real reconciler and
projector wrote, as soon as it is there."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from consumers.components.projector import Projector
from consumers.components.reconciler import Reconciler
from consumers.operations.outcomes import await_outcomes
from statemachine.events import AuditEvent, ProbeRequested
from statemachine.policy import Policy
from tests.contracts.projection_store import at, observed, probe_failed, started
from tests.pipeline import Pipeline, append, probe_request, run_until_idle

OOM = {"name": "Error", "message": "Worker exceeded memory limit"}
LATER = at(30)  # observations come 30 minutes after the audits started


def request(audit_id: str) -> ProbeRequested:
    return probe_request(audit_id, f"wf-{audit_id}", LATER)


def started_audit(audit_id: str, minutes_ago: float = 30) -> AuditEvent:
    return started(audit_id, LATER - timedelta(minutes=minutes_ago), instance=f"wf-{audit_id}")


async def reconcile_and_project(
    pipeline: Pipeline, events: list[AuditEvent], policy: Policy
) -> None:
    await append(pipeline.log, pipeline.topics.lifecycle, events)
    async with (
        Reconciler(pipeline.log, policy) as reconciler,
        Projector(pipeline.log, pipeline.store.writer) as projector,
    ):
        await run_until_idle(reconciler, projector)


async def test_each_request_gets_the_outcome_its_causation_chain_leads_to(
    pipeline: Pipeline,
) -> None:
    # given five probed audits: dead, healthy, too young to be lost, not answered, and one
    # whose observation has not arrived
    requests = {name: request(name) for name in ("dead", "healthy", "young", "silent", "late")}
    events: list[AuditEvent] = [
        started_audit("dead"),
        started_audit("healthy"),
        started_audit("young", minutes_ago=2),
        started_audit("silent"),
        started_audit("late"),
        observed("dead", "errored", LATER, "wf-dead", requests["dead"].event_id, error=OOM),
        observed("healthy", "running", LATER, "wf-healthy", requests["healthy"].event_id),
        observed("young", "not_found", LATER, "wf-young", requests["young"].event_id),
        probe_failed("silent", LATER, requests["silent"].event_id),
    ]
    policy = Policy()
    await reconcile_and_project(pipeline, events, policy)

    # when the outcomes are awaited
    outcomes = await await_outcomes(pipeline.store, list(requests.values()), policy, timeout=0.5)

    # then each follows from what was recorded; the missing one is pending
    got = {o.audit_id: o for o in outcomes}
    assert [o.audit_id for o in outcomes] == list(requests)  # in request order
    assert {a: o.request_id for a, o in got.items()} == {
        a: str(r.event_id) for a, r in requests.items()
    }
    assert (got["dead"].result, got["dead"].error_code, got["dead"].rule) == (
        "failed", "oom", "errored",
    )  # fmt: skip
    assert got["dead"].observed_status == "errored"
    assert (got["healthy"].result, got["healthy"].observed_status) == ("healthy", "running")
    assert (got["young"].result, got["young"].rule) == ("unchanged", "instance_lost")
    assert (got["silent"].result, got["silent"].probe_error) == ("probe_error", "timeout")
    assert (got["late"].result, got["late"].observed_status) == ("pending", None)


async def test_it_returns_as_soon_as_outcomes_arriving_while_it_waits_are_in(
    pipeline: Pipeline,
) -> None:
    # given a request whose observation and decision are not recorded yet
    probe = request("dead")
    policy = Policy()
    waiting = asyncio.create_task(await_outcomes(pipeline.store, [probe], policy, timeout=60))
    began = time.monotonic()

    # when the observation arrives and the pipeline handles it
    dead = observed("dead", "terminated", LATER, "wf-dead", probe.event_id)
    await reconcile_and_project(pipeline, [started_audit("dead"), dead], policy)

    # then the wait ends with the decision, long before its timeout
    [outcome] = await asyncio.wait_for(waiting, 30)
    assert (outcome.result, outcome.error_code) == ("failed", "workflow_terminated")
    assert time.monotonic() - began < 30


async def test_in_shadow_mode_the_outcome_is_what_would_have_failed(pipeline: Pipeline) -> None:
    probe = request("dead")
    shadow = Policy(shadow=True)
    events = [started_audit("dead"), observed("dead", "errored", LATER, "wf-dead", probe.event_id)]
    await reconcile_and_project(pipeline, events, shadow)

    [outcome] = await await_outcomes(pipeline.store, [probe], shadow, timeout=10)

    assert (outcome.result, outcome.error_code) == ("would_fail", "unknown")
    row = await pipeline.store.audits.get("dead")
    assert row is not None and row.status == "running"


async def test_a_second_observation_of_an_audit_failed_by_the_first_reports_that_failure(
    pipeline: Pipeline,
) -> None:
    # given two requests about one dead audit, both observed errored, decided once
    first, second = request("dead"), request("dead")
    events = [
        started_audit("dead"),
        observed("dead", "errored", LATER, "wf-dead", first.event_id, error=OOM),
        observed("dead", "errored", LATER + timedelta(seconds=1), "wf-dead", second.event_id),
    ]
    policy = Policy()
    await reconcile_and_project(pipeline, events, policy)

    # when both outcomes are awaited
    outcomes = await await_outcomes(pipeline.store, [first, second], policy, timeout=10)

    # then both report the one failure, without waiting for a second decision
    assert [(o.result, o.error_code) for o in outcomes] == [("failed", "oom"), ("failed", "oom")]
    decisions = [
        h.event
        for h in await pipeline.store.audits.history("dead")
        if h.event.type == "AuditFailed"
    ]
    assert len(decisions) == 1


async def test_without_requests_it_answers_at_once(pipeline: Pipeline) -> None:
    began = time.monotonic()
    assert await await_outcomes(pipeline.store, [], Policy(), timeout=30) == []
    assert time.monotonic() - began < 5
