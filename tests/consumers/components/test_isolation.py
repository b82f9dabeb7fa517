"""Isolation on each backend pair: an event a consumer cannot handle, for a reason retrying
would not change, goes to the dead-letter topic with the reason, and the rest of its batch and
partition proceed; a retriable error is not dead-lettered but handled again."""

from __future__ import annotations

import json
from typing import Any

import pytest

from consumers.components.probe import Probe
from consumers.components.reconciler import Reconciler
from consumers.components.reconciler.log import fold_into
from consumers.workflows.client import WorkflowsClient
from consumers.workflows.simulator.server import SimulatorServer
from statemachine.errors import EventLogError
from statemachine.events import AuditEvent, AuditFailed, AuditFailureHeld, WorkflowStatusObserved
from statemachine.policy import Policy
from statemachine.state import AuditState
from tests.contracts.projection_store import at, observed, started
from tests.pipeline import (
    Pipeline,
    append,
    lifecycle_events,
    probe_request,
    read_topic,
    run_until_idle,
)

NOW = at(60)
OOM = "Worker exceeded memory limit"


class PoisonedReconciler(Reconciler):
    """A reconciler that cannot judge one audit (as a bug or a hostile event would make it)."""

    failure: Exception = ValueError("cannot judge this one")

    def _judge(
        self,
        states: dict[str, AuditState],
        holds: dict[str, AuditFailureHeld],
        event: AuditEvent,
        brake_engaged: bool = False,
    ) -> AuditEvent | None:
        if event.audit_id == "poison":
            raise self.failure
        return super()._judge(states, holds, event, brake_engaged)

    def _fold(  # the events no rule judges: folded without _judge
        self,
        states: dict[str, AuditState],
        holds: dict[str, AuditFailureHeld],
        event: AuditEvent,
        before: AuditState | None,
    ) -> AuditState:
        if event.audit_id == "poison":
            raise self.failure
        return fold_into(states, holds, event, before)


class PoisonedProbe(Probe):
    @classmethod
    def _answer(cls, request: Any, *args: Any) -> Any:
        if request.audit_id == "poison":
            raise ValueError("cannot answer this one")
        return super()._answer(request, *args)


async def dead_letters(pipeline: Pipeline) -> list[dict[str, Any]]:
    records = await read_topic(pipeline.log, pipeline.topics.dead_letter)
    return [json.loads(r.value) for r in records]


def dead_audits() -> list[AuditEvent]:
    return [
        started("poison", instance="wf-p"),
        started("dead", instance="wf-d"),
        observed("poison", "errored", NOW, instance="wf-p", error=OOM),
        observed("dead", "errored", NOW, instance="wf-d", error=OOM),
    ]


async def test_an_event_the_reconciler_cannot_judge_is_dead_lettered_and_the_rest_decided(
    pipeline: Pipeline,
) -> None:
    # given two dead audits, one of which the reconciler cannot judge
    await append(pipeline.log, pipeline.topics.lifecycle, dead_audits())

    # when the reconciler runs
    async with PoisonedReconciler(pipeline.log, Policy()) as reconciler:
        await run_until_idle(reconciler)

    # then the other audit was decided, and each of the poison's events is a dead letter
    events = await lifecycle_events(pipeline.log, at_least=5)
    decisions = [e for e in events if isinstance(e, AuditFailed)]
    assert [(d.audit_id, d.data.error_code) for d in decisions] == [("dead", "oom")]
    dead = await dead_letters(pipeline)
    assert sorted(json.loads(d["original"])["type"] for d in dead) == [
        "AuditStarted", "WorkflowStatusObserved",
    ]  # fmt: skip
    group = pipeline.topics.group("reconciler")
    assert all(d["consumer"] == group and "cannot judge this one" in d["error"] for d in dead)


async def test_a_retriable_error_is_handled_again_not_dead_lettered(pipeline: Pipeline) -> None:
    # given a dead audit, and a reconciler that hits a retriable error judging it
    await append(pipeline.log, pipeline.topics.lifecycle, dead_audits()[1::2])
    reconciler = PoisonedReconciler(pipeline.log, Policy())
    reconciler.failure = EventLogError("the log is down", retriable=True)
    await append(pipeline.log, pipeline.topics.lifecycle, [started("poison", instance="wf-p")])

    # when it steps: the error propagates (the runner backs off and restarts it)
    async with reconciler:
        reconciler.poll_timeout = 0.05
        with pytest.raises(EventLogError, match="the log is down"):
            for _ in range(50):
                await reconciler.step()

    # then nothing was dead-lettered, and a healthy reconciler decides from the same offsets
    assert await dead_letters(pipeline) == []
    async with Reconciler(pipeline.log, Policy()) as healthy:
        await run_until_idle(healthy)
    events = await lifecycle_events(pipeline.log, at_least=4)
    assert [e.audit_id for e in events if isinstance(e, AuditFailed)] == ["dead"]


async def test_a_request_the_probe_cannot_answer_is_dead_lettered_and_the_rest_answered(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    # given requests about two instances, one of which the probe cannot turn into an answer
    simulator.sim.set_instance("wf-p", "running")
    simulator.sim.set_instance("wf-ok", "running")
    poison, fine = probe_request("poison", "wf-p", NOW), probe_request("fine", "wf-ok", NOW)
    await append(pipeline.log, pipeline.topics.probe_requests, [poison, fine])

    # when the probe runs
    async with PoisonedProbe(pipeline.log, client, clock=lambda: NOW) as probe:
        await run_until_idle(probe)

    # then the other request was answered, and the poison one is a dead letter
    [answer] = await lifecycle_events(pipeline.log, at_least=1)
    assert isinstance(answer, WorkflowStatusObserved) and answer.causation_id == fine.event_id
    [dead] = await dead_letters(pipeline)
    assert json.loads(dead["original"])["event_id"] == str(poison.event_id)
    assert "cannot answer this one" in dead["error"]
    assert probe.probed == 1
