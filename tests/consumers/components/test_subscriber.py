"""The event subscription end to end on each backend pair: the simulator's queue (over real
HTTP) → subscriber → confirmer (asking the simulator) → reconciler → projector.

Each test gives the simulator a queue subscribed to its workflow; changing an instance's status
publishes a message, as Cloudflare's event subscription does.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from consumers.components import subscriber as subscribing
from consumers.components.confirmer import Confirmer, awaiting_confirmation
from consumers.components.probe import Probe
from consumers.components.projector import Projector
from consumers.components.reconciler import Reconciler
from consumers.components.subscriber import Subscriber
from consumers.components.watchdog import Watchdog
from consumers.eventlog.dead_letters import read_dead_letter
from consumers.runtime.health import HealthBoard
from consumers.workflows.client import WorkflowsClient
from consumers.workflows.queues import QueueClient
from consumers.workflows.simulator.server import SimulatorServer
from statemachine.errors import EventLogError
from statemachine.events import AuditEvent, AuditStarted
from statemachine.policy import Policy
from tests.eventually import eventually
from tests.pipeline import Pipeline, append, read_topic, run_until_idle

QUEUE = "q-events"
ACCOUNT = "acc"
POLICY = Policy(finalize_grace=timedelta(minutes=10))


class Rig:
    """The simulator's queue and the components reading it, on one backend pair."""

    def __init__(self, pipeline: Pipeline, simulator: SimulatorServer) -> None:
        self.pipeline = pipeline
        self.simulator = simulator
        self.http = httpx.AsyncClient(base_url=simulator.root_url, timeout=10)
        self.client = WorkflowsClient(
            api_url=simulator.url,
            account_id=ACCOUNT,
            workflow="site-audit",
            api_token=None,
            timeout=5.0,
            max_retries=0,
        )
        self.projector = Projector(pipeline.log, pipeline.store.writer)
        self.reconciler = Reconciler(pipeline.log, POLICY)
        self.confirmer = Confirmer(pipeline.log, self.client, pipeline.store)
        self.health = HealthBoard()
        self.subscribers: list[Subscriber] = []

    async def subscriber(self, *, visibility: float = 30.0) -> Subscriber:
        queue = QueueClient(
            api_url=self.simulator.url, account_id=ACCOUNT, queue_id=QUEUE, api_token=None
        )
        sub = Subscriber(
            self.pipeline.log,
            self.pipeline.store,
            queue,
            workflow="site-audit",
            poll=0.01,
            batch=100,
            visibility=visibility,
            health=self.health,
        )
        self.subscribers.append(sub)
        await sub.start()
        return sub

    async def __aenter__(self) -> Rig:
        await self.client.start()
        await self.queue(faults=None)
        for c in (self.projector, self.reconciler, self.confirmer):
            await c.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for sub in self.subscribers:
            await sub.stop()
        for c in (self.confirmer, self.reconciler, self.projector):
            await c.stop()
        await self.client.stop()
        await self.http.aclose()

    async def queue(self, faults: dict[str, Any] | None, **extra: Any) -> None:
        body: dict[str, Any] = {"workflows": ["site-audit"], **extra}
        if faults is not None:
            body["faults"] = faults
        answer = await self.http.put(f"/_sim/queues/{QUEUE}", json=body)
        assert answer.status_code == 200, answer.text

    async def stats(self) -> dict[str, Any]:
        answer = await self.http.get(f"/_sim/queues/{QUEUE}")
        assert answer.status_code == 200, answer.text
        stats: dict[str, Any] = answer.json()
        return stats

    async def inject(self, body: str, content_type: str = "json") -> None:
        answer = await self.http.post(
            f"/_sim/queues/{QUEUE}/messages", json={"body": body, "content_type": content_type}
        )
        assert answer.status_code in (200, 201, 204), answer.text

    async def instance(self, instance: str, status: str, **body: Any) -> None:
        answer = await self.http.put(
            f"/_sim/workflows/site-audit/instances/{instance}", json={"status": status, **body}
        )
        assert answer.status_code == 200, answer.text

    async def start_audit(self, audit_id: str, instance: str) -> None:
        await self.start_audits([(audit_id, instance)])

    async def start_audits(self, audits: list[tuple[str, str]]) -> None:
        """Running audits on running instances, projected (the queue's messages for the
        instances' starts are drained and acknowledged)."""
        started = datetime.now(UTC) - timedelta(minutes=1)
        for _, instance in audits:
            await self.instance(instance, "running")
        lifecycle = self.pipeline.topics.lifecycle
        await append(self.pipeline.log, lifecycle, [audit(a, i, started) for a, i in audits])
        await self.drain()

    async def drain(self, *subs: Subscriber) -> None:
        subs = subs or tuple(self.subscribers) or (await self.subscriber(),)
        await run_until_idle(self.projector)
        for _ in range(2):  # a round steps the chain through; the second finds it quiet
            await run_until_idle(*subs, self.confirmer, self.reconciler, self.projector)

    async def history(self, audit_id: str) -> list[AuditEvent]:
        return [h.event for h in await self.pipeline.store.audits.history(audit_id)]


def audit(audit_id: str, instance: str, at: datetime) -> AuditStarted:
    return AuditStarted(
        event_id=uuid.uuid4(),
        audit_id=audit_id,
        occurred_at=at,
        producer="crawler",
        data={"project_id": "p-1", "workflow_instance_id": instance, "started_at": at},
    )


def types(history: list[AuditEvent]) -> list[str]:
    return [e.type for e in history]


@pytest.fixture
async def rig(pipeline: Pipeline, simulator: SimulatorServer) -> AsyncIterator[Rig]:
    async with Rig(pipeline, simulator) as opened:
        yield opened


# --- each message type --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error", "code"),
    [
        ("errored", {"name": "Error", "message": "Exceeded Memory Limit"}, "oom"),
        ("terminated", None, "workflow_terminated"),
    ],
)
async def test_a_death_the_queue_reports_is_confirmed_with_one_request_and_fails_the_audit(
    rig: Rig, status: str, error: Any, code: str
) -> None:
    await rig.start_audit("a-1", "wf-1")
    requests_before = rig.simulator.sim.requests_for("wf-1")

    await rig.instance("wf-1", status, error=error)
    await rig.drain()

    row = await rig.pipeline.store.audits.get("a-1")
    assert row is not None and row.status == "failed"
    assert row.state.error_code == code
    assert row.state.reconciled_by == "subscription"
    history = await rig.history("a-1")
    failed = [e for e in history if e.type == "AuditFailed"]
    assert len(failed) == 1
    policy = failed[0].data.policy  # type: ignore[union-attr]
    assert policy is not None and policy["trigger"] == "subscription"
    assert "reported_at" in policy and "message_id" in policy
    # one GET confirmed it; the message itself asked for nothing more
    assert rig.simulator.sim.requests_for("wf-1") - requests_before == 1
    stats = await rig.stats()
    assert stats["visible"] == 0 and stats["leased"] == 0


async def test_a_completion_the_queue_reports_is_confirmed_and_waits_for_the_finalize_grace(
    rig: Rig,
) -> None:
    await rig.start_audit("a-done", "wf-done")

    await rig.instance("wf-done", "complete")
    await rig.drain()

    row = await rig.pipeline.store.audits.get("a-done")
    assert row is not None and row.status == "running"  # the publisher's AuditCompleted may come
    observed = [e for e in await rig.history("a-done") if e.type == "WorkflowStatusObserved"]
    confirmed = [e for e in observed if e.data.trigger == "subscription"]  # type: ignore[union-attr]
    assert [e.data.status for e in confirmed if e.data.source == "instance"] == ["complete"]  # type: ignore[union-attr]


@pytest.mark.parametrize(("status", "observed"), [("queued", "queued"), ("paused", "paused")])
async def test_a_live_status_the_queue_reports_is_observed_without_a_request(
    rig: Rig, status: str, observed: str
) -> None:
    await rig.start_audit("a-live", "wf-live")
    requests_before = rig.simulator.sim.requests_for("wf-live")

    await rig.instance("wf-live", status)
    await rig.drain()

    reported = [
        e
        for e in await rig.history("a-live")
        if e.type == "WorkflowStatusObserved" and e.data.source == "subscription"  # type: ignore[union-attr]
    ]
    # the start (running) when the audit began, then this status
    assert [e.data.status for e in reported] == ["running", observed]  # type: ignore[union-attr]
    assert reported[-1].data.notice is not None  # type: ignore[union-attr]
    assert rig.simulator.sim.requests_for("wf-live") == requests_before
    row = await rig.pipeline.store.audits.get("a-live")
    assert row is not None and row.status == "running"


# --- exactly once over an at-least-once queue ---------------------------------------------------


async def test_duplicated_and_reordered_messages_change_nothing_twice(rig: Rig) -> None:
    await rig.queue({"duplicate": 1.0, "reorder": True, "seed": 7})
    await rig.start_audits([(f"a-{i}", f"wf-{i}") for i in range(5)])

    for i in range(5):
        await rig.instance(f"wf-{i}", "errored", error="Exceeded Memory Limit")
    await rig.drain()

    for i in range(5):
        history = await rig.history(f"a-{i}")
        assert types(history).count("AuditFailed") == 1, types(history)
        # the duplicate start message was the same event: one observation of it
        starts = [
            e
            for e in history
            if e.type == "WorkflowStatusObserved" and e.data.source == "subscription"  # type: ignore[union-attr]
        ]
        assert len(starts) == 1
    stats = await rig.stats()
    assert stats["duplicated"] >= 10 and stats["visible"] == 0 and stats["leased"] == 0
    # and no copy was taken for a conflicting event (a dead letter)
    assert await read_topic(rig.pipeline.log, rig.pipeline.topics.dead_letter) == []


def raising(sub: Subscriber, kind: type[Exception]) -> Callable[[], Awaitable[bool]]:
    """A check for :func:`eventually`: one step of ``sub``; true once a step raised ``kind``."""

    async def check() -> bool:
        try:
            await sub.step()
        except kind:
            return True
        return False

    return check


class Crash(Exception):
    """The process dies between the append and the acknowledgement."""


async def test_a_crash_between_the_append_and_the_ack_redelivers_and_changes_nothing(
    rig: Rig,
) -> None:
    await rig.start_audit("a-crash", "wf-crash")
    crashing = await rig.subscriber(visibility=0.5)

    async def crash(*args: Any, **kwargs: Any) -> Any:
        raise Crash()

    crashing.queue.ack = crash  # type: ignore[method-assign]
    await rig.instance("wf-crash", "errored", error="Exceeded Memory Limit")

    await eventually(raising(crashing, Crash), timeout=10, interval=0)  # appended, then died
    await crashing.stop()
    rig.subscribers.remove(crashing)
    assert await awaiting_confirmation(rig.pipeline.log) == {"a-crash"}

    # the lease ends, the queue delivers the message again to another subscriber
    await asyncio.sleep(0.6)
    await rig.drain(await rig.subscriber())

    history = await rig.history("a-crash")
    assert types(history).count("AuditFailed") == 1
    stats = await rig.stats()
    assert stats["visible"] == 0 and stats["leased"] == 0 and stats["acked"] >= 2


async def test_two_subscribers_on_one_queue_lose_nothing_and_double_nothing(rig: Rig) -> None:
    n = 20
    await rig.start_audits([(f"a-{i}", f"wf-{i}") for i in range(n)])
    one, two = await rig.subscriber(), await rig.subscriber()
    for sub in (one, two):
        sub.batch = 3  # small batches: both get some

    for i in range(n):
        await rig.instance(f"wf-{i}", "terminated")

    async def both() -> None:
        await asyncio.gather(run_until_idle(one), run_until_idle(two))

    await both()
    await rig.drain(one, two)

    assert one.pulled > 0 and two.pulled > 0
    for i in range(n):
        history = await rig.history(f"a-{i}")
        assert types(history).count("AuditFailed") == 1, (i, types(history))
    stats = await rig.stats()
    assert stats["visible"] == 0 and stats["leased"] == 0


# --- what cannot be matched or read -------------------------------------------------------------


async def test_an_unreadable_message_is_dead_lettered_and_acknowledged(rig: Rig) -> None:
    sub = await rig.subscriber()
    await rig.inject("this is not JSON")
    await rig.inject('{"type": "cf.workflows.workflow.instance.exploded"}')

    await rig.drain(sub)

    records = await read_topic(rig.pipeline.log, rig.pipeline.topics.dead_letter)
    letters = [read_dead_letter(r) for r in records]
    mine = [x for x in letters if x is not None and x.origin and x.origin[0] == sub.source]
    assert len(mine) == 2
    reasons = sorted(x.reason for x in mine)
    assert reasons[0].startswith("unreadable message: not JSON")
    assert reasons[1] == "unreadable message: unknown instance event 'exploded'"
    assert {x.original for x in mine} == {
        b"this is not JSON",
        b'{"type": "cf.workflows.workflow.instance.exploded"}',
    }
    stats = await rig.stats()
    assert stats["visible"] == 0 and stats["leased"] == 0 and stats["acked"] == 2


async def test_a_message_for_an_audit_not_projected_yet_waits_for_it(rig: Rig) -> None:
    sub = await rig.subscriber()
    await rig.instance("wf-early", "running")
    await rig.instance("wf-early", "errored", error="Exceeded Memory Limit")
    await run_until_idle(sub)  # pulled; no audit holds wf-early yet: held, not acknowledged
    assert (await rig.stats())["leased"] == 2

    started = datetime.now(UTC) - timedelta(minutes=1)
    await append(
        rig.pipeline.log, rig.pipeline.topics.lifecycle, [audit("a-early", "wf-early", started)]
    )
    await rig.drain(sub)

    row = await rig.pipeline.store.audits.get("a-early")
    assert row is not None and row.status == "failed" and row.state.reconciled_by == "subscription"


async def test_a_message_no_audit_ever_holds_is_counted_unmatched_and_acknowledged(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(subscribing, "MATCH_WITHIN", 0.2)
    sub = await rig.subscriber()
    await rig.instance("wf-orphan", "errored", error="boom")

    async def acknowledged() -> bool:
        await sub.step()
        stats = await rig.stats()
        return bool(stats["acked"] == 1 and stats["leased"] == 0)

    await eventually(acknowledged, timeout=10, interval=0.05)
    assert await awaiting_confirmation(rig.pipeline.log) == set()


# --- faults: the watchdog carries on ------------------------------------------------------------


async def test_a_pull_outage_warns_and_the_watchdog_still_finds_the_death(rig: Rig) -> None:
    await rig.start_audit("a-out", "wf-out")
    await rig.queue({"pull_error": {"http_status": 503, "times": None}})
    sub = await rig.subscriber()

    await rig.instance("wf-out", "errored", error="Exceeded Memory Limit")
    await sub.step()

    assert any("the last pull of queue q-events failed" in w for w in rig.health.warnings())
    watchdog = Watchdog(
        rig.pipeline.log,
        rig.pipeline.store,
        stale_after=timedelta(seconds=30),
        interval=timedelta(minutes=5),
        batch_limit=10,
    )
    probe = Probe(rig.pipeline.log, rig.client)
    await probe.start()
    try:
        await watchdog.tick()
        await run_until_idle(probe, rig.reconciler, rig.projector)
    finally:
        await probe.stop()
    row = await rig.pipeline.store.audits.get("a-out")
    assert row is not None and row.status == "failed" and row.state.reconciled_by == "watchdog"

    await rig.queue(None)  # the queue answers again: the warning goes
    await eventually(lambda: _pulled_ok(sub, rig), timeout=10, interval=0.05)


async def _pulled_ok(sub: Subscriber, rig: Rig) -> bool:
    await sub.step()
    return not rig.health.warnings()


async def test_the_watchdog_leaves_out_audits_whose_confirmation_waits(rig: Rig) -> None:
    await rig.start_audits([("a-wait", "wf-wait"), ("a-other", "wf-other")])
    sub = await rig.subscriber()
    await rig.instance("wf-wait", "errored", error="boom")
    await run_until_idle(sub)  # appended to the confirmations; the confirmer has not run

    watchdog = Watchdog(
        rig.pipeline.log,
        rig.pipeline.store,
        stale_after=timedelta(seconds=30),
        interval=timedelta(minutes=5),
        batch_limit=10,
        confirming=lambda: awaiting_confirmation(rig.pipeline.log),
    )
    tick = await watchdog.tick()

    assert [r.audit_id for r in tick.candidates] == ["a-other"]


async def test_a_burst_of_deaths_waits_for_the_budget_and_loses_none(rig: Rig) -> None:
    n = 8
    await rig.start_audits([(f"a-{i}", f"wf-{i}") for i in range(n)])
    rig.confirmer.client = slow = WorkflowsClient(
        api_url=rig.simulator.url,
        account_id=ACCOUNT,
        workflow="site-audit",
        api_token=None,
        budget=3,
        budget_window=1.0,
        max_retries=0,
    )
    await slow.start()
    began = time.monotonic()
    try:
        for i in range(n):
            await rig.instance(f"wf-{i}", "errored", error="Exceeded Memory Limit")
        await rig.drain()
        await eventually(
            lambda: _all_failed(rig, n), timeout=30, interval=0.1, message="every audit failed"
        )
    finally:
        await slow.stop()

    # every death confirmed with one request, none dropped, at three requests a second at
    # most: eight take two windows past the first
    took = time.monotonic() - began
    assert sum(rig.simulator.sim.requests_for(f"wf-{i}") for i in range(n)) == n
    assert took >= 1.9, took


async def _all_failed(rig: Rig, n: int) -> bool:
    await run_until_idle(rig.confirmer, rig.reconciler, rig.projector)
    rows = [await rig.pipeline.store.audits.get(f"a-{i}") for i in range(n)]
    return all(r is not None and r.status == "failed" for r in rows)


async def test_while_the_log_cannot_take_a_batch_nothing_more_is_pulled(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    await rig.start_audit("a-down", "wf-down")
    sub = await rig.subscriber(visibility=0.5)
    log = rig.pipeline.log

    async def down(*args: Any, **kwargs: Any) -> None:
        raise EventLogError("the event log is down", retriable=True)

    # given the log refuses appends (and pings) when a death is pulled
    monkeypatch.setattr(log, "append", down)
    monkeypatch.setattr(log, "ping", down)
    await rig.instance("wf-down", "errored", error="Exceeded Memory Limit")

    failed_step = raising(sub, EventLogError)
    await eventually(failed_step, timeout=10, interval=0)
    pulls = (await rig.stats())["pulls"]

    # then the next steps fail on the ping and pull nothing (no delivery attempt is used up)
    for _ in range(3):
        await eventually(failed_step, timeout=10, interval=0)
    assert (await rig.stats())["pulls"] == pulls

    # and once the log is back, the message comes back and the death is decided once
    monkeypatch.undo()
    await asyncio.sleep(0.6)
    await rig.drain(sub)
    history = await rig.history("a-down")
    assert types(history).count("AuditFailed") == 1


# --- several workflows --------------------------------------------------------------------------


async def test_each_workflow_reports_its_own_audits_and_unwatched_ones_are_ignored(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(subscribing, "MATCH_WITHIN", 0.2)
    # given a queue subscribed to three workflows, two of them watched
    await rig.queue(None, workflows=["site-audit", "keyword-research", "not-ours"])
    queue = QueueClient(
        api_url=rig.simulator.url, account_id=ACCOUNT, queue_id=QUEUE, api_token=None
    )
    sub = Subscriber(
        rig.pipeline.log,
        rig.pipeline.store,
        queue,
        workflow="site-audit",
        workflows=("site-audit", "keyword-research"),
        poll=0.01,
        visibility=30.0,
    )
    rig.subscribers.append(sub)
    await sub.start()
    # and an audit running in keyword-research
    sim = rig.simulator.sim
    sim.set_instance("kr-1", "running", workflow="keyword-research")
    started = datetime.now(UTC) - timedelta(minutes=1)
    kr = AuditStarted(
        event_id=uuid.uuid4(),
        audit_id="kr",
        occurred_at=started,
        producer="crawler",
        data={"project_id": "p-1", "workflow_instance_id": "kr-1", "workflow": "keyword-research"},
    )
    await append(rig.pipeline.log, rig.pipeline.topics.lifecycle, [kr])
    await rig.drain(sub)

    # when an instance with the same id dies in an unwatched workflow and in the default one
    sim.set_instance("kr-1", "errored", workflow="not-ours", error="Exceeded Memory Limit")
    sim.set_instance("kr-1", "errored", workflow="site-audit", error="Exceeded Memory Limit")
    await eventually(
        lambda: _acked(rig, sub, 2), timeout=10, interval=0.05, message="both messages acked"
    )
    await rig.drain(sub)

    # then the audit is untouched: neither message is about its instance (only its own start
    # in keyword-research was observed)
    row = await rig.pipeline.store.audits.get("kr")
    assert row is not None and row.status == "running"
    observed = [e for e in await rig.history("kr") if e.type == "WorkflowStatusObserved"]
    assert [(o.data.status, o.data.workflow) for o in observed] == [  # type: ignore[union-attr]
        ("running", "keyword-research")
    ]

    # when its own instance dies in its workflow
    sim.set_instance(
        "kr-1", "errored", workflow="keyword-research", error="Worker exceeded CPU time limit"
    )
    await rig.drain(sub)

    # then it is confirmed in that workflow and fails with the error read there
    row = await rig.pipeline.store.audits.get("kr")
    assert row is not None and (row.status, row.state.error_code) == ("failed", "cpu_limit")
    observed = [e for e in await rig.history("kr") if e.type == "WorkflowStatusObserved"]
    assert [(o.data.status, o.data.source) for o in observed] == [  # type: ignore[union-attr]
        ("running", "subscription"),
        ("errored", "instance"),
    ]
    assert {o.data.workflow for o in observed} == {"keyword-research"}  # type: ignore[union-attr]


async def _acked(rig: Rig, sub: Subscriber, n: int) -> bool:
    await sub.step()
    stats = await rig.stats()
    return bool(stats["acked"] >= n and stats["leased"] == 0)
