"""The outcome feed end to end: a real ``auditrec serve`` folds the lifecycle log and delivers
every entry to signed webhook receivers and to a Cloudflare Queue (the simulator's), on both
backend pairs, through SIGKILLs of the process; a failing endpoint backs off, parks, and an
operator's retry delivers what was parked, in order.

The events are appended to the log as their writers would (the test stands in for the
publishers, the reconciler and the brake), so every outcome type occurs; what each endpoint must
receive is computed from the log itself with the same pure functions.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import random
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from consumers.eventlog.codec import encode
from consumers.eventlog.factory import open_event_log
from consumers.eventlog.port import EventLog, Topics
from consumers.runtime.settings import load_settings
from consumers.workflows.simulator.bodies import WebhookFaultsBody
from consumers.workflows.simulator.server import SimulatorServer
from statemachine.events import (
    AuditEvent,
    AuditFailureDiscarded,
    AuditFailureReleased,
    HeldRelease,
)
from statemachine.outcomes import OUTCOME_TYPES, outcome
from statemachine.policy import Policy
from statemachine.rules import decide
from statemachine.state import evolve, initial
from tests import cli
from tests.conftest import Backend
from tests.e2e.test_faults import Proc, read_log
from tests.eventually import eventually_sync
from tests.statemachine.sm_builders import completed, failed, observed, started
from tests.statemachine.test_restore import operator_failed, restored

SECRET = "whsec_" + base64.b64encode(b"outcome-feed-test-secret-32bytes").decode()
QUEUE = "product-outcomes"
FEED = "projector,reconciler,outcomes"
POLICY = Policy(instance_lost_grace=timedelta(0))


def scenario(kind: str, audit_id: str, t0: datetime) -> list[AuditEvent]:
    """One audit's events, as their writers append them; between them every outcome type."""

    def when(seconds: float) -> datetime:
        return t0 + timedelta(seconds=seconds)

    start = started(when=when(0), audit_id=audit_id)
    if kind == "completes":
        return [start, completed(when=when(5), audit_id=audit_id)]
    if kind == "workflow_fails":
        return [start, failed(code="oom", by="workflow", when=when(5), audit_id=audit_id)]
    if kind == "overturned":
        lost = failed(code="instance_lost", by="reconciler", when=when(5), audit_id=audit_id)
        return [start, lost, completed(when=when(9), audit_id=audit_id)]
    if kind == "restored":
        by_hand = operator_failed(when=when(5)).model_copy(update={"audit_id": audit_id})
        back = restored(by_hand, actor="token:ops").model_copy(
            update={"audit_id": audit_id, "occurred_at": when(7)}
        )
        return [start, by_hand, back, completed(when=when(9), audit_id=audit_id)]
    # held, then released or discarded by an operator
    state = evolve(initial(audit_id), start)
    gone = observed("not_found", when=when(5), audit_id=audit_id)
    _, held = decide(state, gone, POLICY, brake_engaged=True)
    assert held is not None
    ended = HeldRelease(held_id=held.event_id, actor="cli:ops", reason="the API was down")
    envelope = {"audit_id": audit_id, "occurred_at": when(8), "producer": "auditrec-brake"}
    cls = AuditFailureReleased if kind == "released" else AuditFailureDiscarded
    return [start, gone, held, cls(event_id=uuid.uuid4(), data=ended, **envelope)]


KINDS = ["completes", "workflow_fails", "overturned", "restored", "released", "discarded"]


def events_of(audits: int, seed: int) -> list[AuditEvent]:
    """``audits`` scenarios, their events interleaved (each audit's in its order)."""
    rng = random.Random(seed)
    t0 = datetime.now(UTC) - timedelta(minutes=5)
    per = [scenario(KINDS[i % len(KINDS)], f"feed-{seed}-{i}", t0) for i in range(audits)]
    out: list[AuditEvent] = []
    while any(per):
        events = rng.choice([p for p in per if p])
        out.append(events.pop(0))
    return out


def expected(log: list[AuditEvent]) -> dict[str, list[dict[str, Any]]]:
    """Every audit's entries, in its history's order, from the log as it is."""
    states: dict[str, Any] = {}
    seen: set[tuple[str, uuid.UUID]] = set()
    entries: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in log:
        if (event.audit_id, event.event_id) in seen:
            continue
        seen.add((event.audit_id, event.event_id))
        before = states.get(event.audit_id) or initial(event.audit_id)
        after = states[event.audit_id] = evolve(before, event)
        entry = outcome(before, event, after)
        if entry is not None:
            entries[event.audit_id].append(json.loads(entry.model_dump_json()))
    return entries


async def append(backend: Backend, events: list[AuditEvent], chunk: int, pause: float) -> None:
    log = open_log(backend)
    topic = log.topics.lifecycle
    async with log:
        for i in range(0, len(events), chunk):
            await log.append([encode(topic, e) for e in events[i : i + chunk]])
            await asyncio.sleep(pause)  # on purpose: a stream, so that kills land mid-way


def open_log(backend: Backend) -> EventLog:
    settings = load_settings(event_log_url=backend.event_log_url, database_url=backend.database_url)
    return open_event_log(
        backend.event_log_url,
        Topics(backend.topic_prefix),
        **({"settings": settings} if backend.name != "sqlite" else {}),
    )


def feed_env(backend: Backend, simulator: SimulatorServer, **extra: str) -> dict[str, str]:
    return backend.environ(
        AUDITREC_CLOUDFLARE_API_URL=simulator.url,
        AUDITREC_CLOUDFLARE_ACCOUNT_ID="acc-feed",
        AUDITREC_WEBHOOK_SECRET=SECRET,
        AUDITREC_LOG_FORMAT="json",
        **extra,
    )


def serving(log: Path, pid: int) -> None:
    """Wait until the serve process ``pid`` has said it serves: a SIGTERM that comes before a
    process has its handlers ends it by the signal, not gracefully."""
    eventually_sync(
        lambda: [
            line
            for line in log.read_text().splitlines()
            if '"event": "serving"' in line and f":{pid}:" in line
        ],
        until=bool,
        timeout=60,
        message=f"serve process {pid} serving",
    )


def receiver_url(simulator: SimulatorServer, name: str) -> str:
    return f"{simulator.root_url}/_sim/webhooks/{name}"


@pytest.fixture
def receivers(simulator: SimulatorServer) -> Iterator[SimulatorServer]:
    simulator.sim.add_webhook("all", SECRET)
    simulator.sim.add_webhook("failures", SECRET)
    simulator.sim.add_queue(QUEUE, workflows=[])
    yield simulator


def arrivals(simulator: SimulatorServer, name: str) -> list[dict[str, Any]]:
    deliveries: list[dict[str, Any]] = simulator.sim.webhooks.get(name)["deliveries"]
    return [d for d in deliveries if d["status"] < 300]


def queued(simulator: SimulatorServer) -> list[dict[str, Any]]:
    return [json.loads(m["body"]) for m in simulator.sim.queue_stats(QUEUE)["messages"]]


def check_endpoint(
    got: list[dict[str, Any]], want: dict[str, list[dict[str, Any]]], types: set[str] | None
) -> None:
    """Each entry wanted arrived at least once, every copy of it identical to it; nothing
    else arrived; each audit's entries first arrived in the order of its history."""
    wanted = {e["id"]: e for entries in want.values() for e in entries
              if types is None or e["type"] in types}  # fmt: skip
    by_id: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for body in got:
        by_id[body["id"]].append(body)
    assert set(by_id) == set(wanted)
    for id_, copies in by_id.items():
        assert all(c == wanted[id_] for c in copies), id_
    first: list[str] = list(dict.fromkeys(b["id"] for b in got))
    for audit_id, entries in want.items():
        order = [e["id"] for e in entries if e["id"] in wanted]
        assert [i for i in first if i in set(order)] == order, audit_id


def test_every_outcome_reaches_every_endpoint_once_at_least_in_audit_order_across_kills(
    backend: Backend, receivers: SimulatorServer, tmp_path: Path
) -> None:
    sim = receivers
    env = feed_env(
        backend,
        sim,
        AUDITREC_WEBHOOK_URLS=(
            f"{receiver_url(sim, 'all')} {receiver_url(sim, 'failures')}#audit.failed"
        ),
        AUDITREC_OUTCOME_QUEUE_ID=QUEUE,
    )
    init = cli.run("init", env=env)
    assert init.returncode == 0, init.stderr
    serve = Proc(env, FEED, tmp_path / "serve.log")
    serve.start()
    events = events_of(audits=36, seed=7)

    async def stream_and_kill() -> None:
        writer = asyncio.create_task(append(backend, events, chunk=6, pause=0.15))
        rng = random.Random(11)
        while not writer.done():
            await asyncio.sleep(rng.uniform(0.6, 1.4))  # on purpose: a random kill point
            serve.kill()
            serve.start()
        await writer

    try:
        asyncio.run(stream_and_kill())

        def delivered_and_wanted() -> tuple[int, int, int]:
            # The log grows after the stream (the reconciler's decisions): read it each time.
            want = expected(asyncio.run(read_log(backend)))
            return (
                len({d["body"]["id"] for d in arrivals(sim, "all")}),
                len({b["id"] for b in queued(sim)}),
                sum(len(v) for v in want.values()),
            )

        eventually_sync(
            delivered_and_wanted,
            until=lambda n: n[0] == n[1] == n[2],
            timeout=90,
            message="every entry of the log at the webhook and on the queue",
        )
        time.sleep(1.0)  # on purpose: let any late duplicate arrive before it is judged
        assert serve.p is not None
        serving(tmp_path / "serve.log", serve.p.pid)  # the last one is up
    finally:
        assert serve.stop() == 0, (tmp_path / "serve.log").read_text()[-3000:]

    assert serve.kills >= 2
    want = expected(asyncio.run(read_log(backend)))
    assert {e["type"] for entries in want.values() for e in entries} == set(OUTCOME_TYPES)
    all_ = arrivals(sim, "all")
    assert all(d["verified"] for d in all_)
    assert all(d["id"] == d["body"]["id"] for d in all_)  # webhook-id is the entry's id
    check_endpoint([d["body"] for d in all_], want, None)
    check_endpoint([d["body"] for d in arrivals(sim, "failures")], want, {"audit.failed"})
    check_endpoint(queued(sim), want, None)


def deliveries(env: dict[str, str], *args: str) -> dict[str, Any]:
    result = cli.run("deliveries", *args, "--json", env=env)
    assert result.returncode == 0, result.stderr
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def test_a_failing_endpoint_backs_off_parks_and_an_operator_retry_delivers_in_order(
    backend: Backend, simulator: SimulatorServer, tmp_path: Path
) -> None:
    sim = simulator
    sim.sim.add_webhook("flaky", SECRET, down=True, status=503)
    sim.sim.add_webhook("healthy", SECRET)
    env = feed_env(
        backend,
        sim,
        AUDITREC_WEBHOOK_URLS=f"{receiver_url(sim, 'flaky')},{receiver_url(sim, 'healthy')}",
        AUDITREC_WEBHOOK_RETRY_FOR="4s",
    )
    assert cli.run("init", env=env).returncode == 0
    t0 = datetime.now(UTC) - timedelta(minutes=5)
    x = scenario("restored", "parked-x", t0)  # failed, restored, completed
    y = scenario("completes", "parked-y", t0)
    serve = Proc(env, FEED, tmp_path / "serve.log")
    serve.start()
    try:
        asyncio.run(append(backend, x[:2], chunk=2, pause=0))
        # The failure is tried again and again, further apart each time, then parked.
        listed = eventually_sync(
            lambda: deliveries(env, "list"),
            until=lambda d: d["total"] == 1,
            timeout=30,
            message="the failure parked after AUDITREC_WEBHOOK_RETRY_FOR",
        )
        tries = sim.sim.webhooks.get("flaky")["deliveries"]
        (failure,) = listed["parked"]
        assert failure["type"] == "audit.failed" and failure["error"] == "HTTP 503"
        assert {t["id"] for t in tries} == {failure["outcome_id"]}  # nothing behind it was sent
        assert len(tries) == failure["attempts"] >= 3
        at = [datetime.fromisoformat(t["received_at"]).timestamp() for t in tries]
        gaps = [b - a for a, b in itertools.pairwise(at)]
        assert gaps[-1] > gaps[0] >= 0.4, gaps  # exponential back-off, with jitter
        # The other endpoint was never held back.
        assert [d["body"]["type"] for d in arrivals(sim, "healthy")] == ["audit.failed"]

        sim.sim.webhooks.set_faults("flaky", WebhookFaultsBody(down=False))
        asyncio.run(append(backend, x[2:] + y, chunk=10, pause=0))
        # Another audit goes through; this one's later entries wait behind its parked one.
        eventually_sync(
            lambda: [d["body"]["audit_id"] for d in arrivals(sim, "flaky")],
            until=lambda got: got == ["parked-y"],
            timeout=30,
            message="the other audit's entry delivered",
        )
        behind = eventually_sync(
            lambda: deliveries(env, "list"),
            until=lambda d: d["total"] == 3,
            timeout=30,
            message="the audit's later entries parked behind its failure",
        )
        assert [p["type"] for p in behind["parked"]] == [
            "audit.failed", "audit.restored", "audit.completed",
        ]  # fmt: skip
        assert behind["parked"][1]["error"].startswith("behind an entry of its audit")

        preview = cli.run("deliveries", "retry", failure["outcome_id"], env=env)
        assert preview.returncode == 2 and "needs --yes" in preview.stderr
        assert "would retry 3 parked entries" in preview.stdout  # its audit's others too
        assert deliveries(env, "list")["parked"][0]["retry_requested_at"] is None

        done = cli.run("deliveries", "retry", failure["outcome_id"], "--yes", env=env)
        assert done.returncode == 0, done.stderr
        eventually_sync(
            lambda: deliveries(env, "list")["total"],
            until=lambda n: n == 0,
            timeout=30,
            message="the parked entries delivered",
        )
    finally:
        assert serve.stop() == 0, (tmp_path / "serve.log").read_text()[-3000:]
    got = [d["body"] for d in arrivals(sim, "flaky")]
    assert [(b["audit_id"], b["type"]) for b in got] == [
        ("parked-y", "audit.completed"),
        ("parked-x", "audit.failed"),
        ("parked-x", "audit.restored"),
        ("parked-x", "audit.completed"),
    ]
    healthy = [d["body"] for d in arrivals(sim, "healthy")]
    assert sorted(b["id"] for b in healthy) == sorted(b["id"] for b in got)
