"""One endpoint's outcome feed on each backend pair, stepped in this process against the
simulator: what was recorded before the endpoint was registered is not sent; a queue that
cannot take a batch is retried, then its audits' entries are parked, and an operator's retry
sends them in order once the queue is back."""

from __future__ import annotations

import asyncio
import base64
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from consumers.components.outcomes import Feed, QueueSender, WebhookSender
from consumers.eventlog.codec import encode
from consumers.operations.deliveries import retry_deliveries
from consumers.runtime.endpoints import parse_webhook_urls, queue_endpoint
from consumers.runtime.settings import load_settings
from consumers.workflows.queues import QueueClient
from consumers.workflows.simulator.server import SimulatorServer
from statemachine.events import AuditEvent
from tests.eventually import eventually
from tests.pipeline import Pipeline, run_until_idle
from tests.statemachine.sm_builders import completed, failed, started

SECRET = "whsec_" + base64.b64encode(b"component-test-secret-of-32-byte").decode()


def lives(audit_id: str, ending: str) -> list[AuditEvent]:
    t0 = datetime.now(UTC) - timedelta(minutes=3)
    end = (
        completed(when=t0 + timedelta(seconds=5), audit_id=audit_id)
        if ending == "completes"
        else failed(code="oom", by="workflow", when=t0 + timedelta(seconds=5), audit_id=audit_id)
    )
    return [started(when=t0, audit_id=audit_id), end]


async def append(pipeline: Pipeline, events: list[AuditEvent]) -> None:
    topic = pipeline.topics.lifecycle
    await pipeline.log.append([encode(topic, e) for e in events])


async def test_only_what_is_recorded_after_the_endpoint_is_registered_is_sent(
    pipeline: Pipeline, simulator: SimulatorServer
) -> None:
    simulator.sim.add_webhook("fresh", SECRET)
    (endpoint,) = parse_webhook_urls(f"{simulator.root_url}/_sim/webhooks/fresh")
    await append(pipeline, lives("before-1", "completes"))
    await asyncio.sleep(0.01)  # on purpose: the log's timestamps are milliseconds
    sender = WebhookSender(endpoint.address, SECRET, timeout=5)
    feed = Feed(pipeline.log, pipeline.store, endpoint, sender, retry_for=60)
    async with feed:
        await append(pipeline, lives("after-1", "fails") + lives("after-2", "completes"))
        await run_until_idle(feed)
        got = simulator.sim.webhooks.get("fresh")["deliveries"]
    # at least once on the wire (a send that timed out under load is sent again, same id):
    # the entries' first arrivals
    first = {d["body"]["id"]: (d["body"]["audit_id"], d["body"]["type"]) for d in reversed(got)}
    arrived = list(dict.fromkeys(first[d["body"]["id"]] for d in got))
    assert arrived in (
        [("after-1", "audit.failed"), ("after-2", "audit.completed")],
        [("after-2", "audit.completed"), ("after-1", "audit.failed")],  # two partitions
    )
    assert len(first) == 2
    assert all(d["verified"] for d in got)


async def test_a_queue_that_cannot_take_a_batch_parks_it_and_a_retry_sends_it_in_order(
    pipeline: Pipeline, simulator: SimulatorServer
) -> None:
    endpoint = queue_endpoint("late-queue")  # not created yet: every send is a 404
    client = QueueClient(
        api_url=simulator.url, account_id="acc", queue_id=endpoint.address, api_token=None
    )
    feed = Feed(pipeline.log, pipeline.store, endpoint, QueueSender(client), retry_for=1.5,
                retry_poll=0.1)  # fmt: skip
    store = pipeline.store
    settings = load_settings(outcome_queue_id=endpoint.address, cloudflare_account_id="acc")
    async with feed:
        feed.poll_timeout = 0.05
        await append(pipeline, lives("q-1", "fails"))

        async def parked() -> int:
            await feed.step()
            return (await store.deliveries.parked_counts()).get(endpoint.name, 0)

        await eventually(parked, until=lambda n: n == 1, timeout=20, message="the batch parked")
        (entry,) = await store.deliveries.parked(endpoint.name)
        assert entry.error.startswith("not_found (HTTP 404)") and entry.attempts >= 2
        # A retry while the queue is still missing: one attempt, parked again.
        await retry_deliveries(store, settings, outcome_ids=None, endpoint=None, actor="cli:ops")

        async def parked_again() -> tuple[int, datetime | None]:
            await feed.step()
            (row,) = await store.deliveries.parked(endpoint.name)
            return row.attempts, row.retry_requested_at

        again = await eventually(
            parked_again,
            until=lambda r: r[0] > entry.attempts and r[1] is None,
            timeout=20,
            message="the failed retry parked again",
        )
        assert again[0] == entry.attempts + 1
        await append(pipeline, [completed(audit_id="q-1")])  # no change: a failed audit stays
        await append(pipeline, lives("q-2", "completes"))
        simulator.sim.add_queue(endpoint.address, workflows=[])

        def bodies() -> list[dict[str, Any]]:
            messages = simulator.sim.queue_stats(endpoint.address)["messages"]
            return [json.loads(m["body"]) for m in messages]

        async def sent_to_the_queue() -> list[dict[str, Any]]:
            await feed.step()
            return bodies()

        await eventually(sent_to_the_queue, until=lambda b: len(b) == 1, timeout=20,
                         message="the other audit's entry sent")  # fmt: skip
        assert bodies()[0]["audit_id"] == "q-2"

        asked = await retry_deliveries(
            store, settings, outcome_ids=None, endpoint=None, actor="cli:ops"
        )
        assert asked["requested"] == 1
        await eventually(sent_to_the_queue, until=lambda b: len(b) == 2, timeout=20,
                         message="the parked entry sent")  # fmt: skip

        async def still_parked() -> dict[str, int]:
            await feed.step()
            return await store.deliveries.parked_counts()

        await eventually(still_parked, until=lambda c: c == {}, timeout=20,
                         message="the sent entry out of the store")  # fmt: skip
    assert [(b["audit_id"], b["type"]) for b in bodies()] == [
        ("q-2", "audit.completed"), ("q-1", "audit.failed"),
    ]  # fmt: skip
    assert await store.deliveries.parked_counts() == {}


async def test_a_full_feed_reads_no_more_and_loses_nothing_once_the_endpoint_is_back(
    pipeline: Pipeline, simulator: SimulatorServer
) -> None:
    from consumers.workflows.simulator.bodies import WebhookFaultsBody

    simulator.sim.add_webhook("slow", SECRET, down=True, status=503)
    (endpoint,) = parse_webhook_urls(f"{simulator.root_url}/_sim/webhooks/slow")
    sender = WebhookSender(endpoint.address, SECRET, timeout=5)
    feed = Feed(pipeline.log, pipeline.store, endpoint, sender, retry_for=600, max_waiting=2)
    async with feed:
        feed.poll_timeout = 0.05
        await append(pipeline, [e for i in range(6) for e in lives(f"full-{i}", "completes")])
        most = 0
        for _ in range(40):  # on purpose: a fixed number of steps while the endpoint is down
            await feed.step()
            most = max(most, feed.waiting_count)
        assert most == 2  # a poll reads no more than there is room for; then nothing more
        simulator.sim.webhooks.set_faults("slow", WebhookFaultsBody(down=False))

        async def accepted() -> set[str]:
            await feed.step()
            got = simulator.sim.webhooks.get("slow")["deliveries"]
            return {d["body"]["audit_id"] for d in got if d["status"] < 300}

        await eventually(accepted, until=lambda a: len(a) == 6, timeout=60,
                         message="every audit's entry delivered")  # fmt: skip
