"""The watchdog on each backend pair: which audits a tick asks about, in which order, how
many, and that one tick runs at a time across processes."""

from __future__ import annotations

from datetime import timedelta

from consumers.components.watchdog import PRODUCER, Watchdog
from consumers.eventlog.codec import decode_probe
from consumers.runtime.metrics import REGISTRY
from projections.store import ProjectionStore
from statemachine.events import AuditEvent, ProbeRequested, Trigger
from tests.contracts.projection_store import (
    CONSUMER,
    at,
    completed,
    failed,
    observed,
    positioned,
    stall,
    started,
)
from tests.pipeline import Pipeline, read_topic

NOW = at(120)  # the stale cutoff (15 minutes) is at(105)


def watchdog(pipeline: Pipeline, batch_limit: int = 100) -> Watchdog:
    return Watchdog(
        pipeline.log,
        pipeline.store,
        stale_after=timedelta(minutes=15),
        interval=timedelta(minutes=5),
        batch_limit=batch_limit,
        clock=lambda: NOW,
    )


async def project(store: ProjectionStore, events: list[AuditEvent]) -> None:
    await store.writer.apply(positioned(events), {}, CONSUMER)


async def requested(pipeline: Pipeline) -> list[ProbeRequested]:
    records = await read_topic(pipeline.log, pipeline.topics.probe_requests)
    return sorted((decode_probe(r.value) for r in records), key=lambda r: r.audit_id)


async def given_a_mix_of_audits(store: ProjectionStore) -> None:
    await project(
        store,
        [
            started("seen-long-ago", at(0), instance="wf-a"),
            started("never-seen-young", at(100), instance="wf-b"),
            started("never-seen-old", at(10), instance="wf-c"),
            started("seen-lately", at(1), instance="wf-d"),
            started("seen-long-ago-older", at(0, seconds=-1), instance="wf-e"),
            started("fresh", at(110), instance="wf-f"),  # started after the cutoff
            started("completed", at(0), instance="wf-g"),
            started("failed", at(0), instance="wf-h"),
            observed("seen-long-ago", "running", at(50), instance="wf-a"),
            observed("seen-long-ago-older", "running", at(50), instance="wf-e"),
            observed("seen-lately", "running", at(115), instance="wf-d"),
            completed("completed", at(30)),
            failed("failed", at(31)),
        ],
    )


async def test_a_tick_asks_about_stale_running_audits_never_observed_first(
    pipeline: Pipeline,
) -> None:
    # given running audits of every age and observation time, and finished ones
    await given_a_mix_of_audits(pipeline.store)

    # when the watchdog ticks
    tick = await watchdog(pipeline).tick()

    # then the candidates are the stale running audits: never observed first (oldest first),
    # then least recently observed, then oldest
    assert [r.audit_id for r in tick.candidates] == [
        "never-seen-old",
        "never-seen-young",
        "seen-long-ago-older",
        "seen-long-ago",
        "seen-lately",
    ]
    assert not tick.skipped
    # and one probe request per candidate is in the log, for its instance and this sweep
    sent = await requested(pipeline)
    assert sorted(r.audit_id for r in sent) == sorted(r.audit_id for r in tick.candidates)
    assert {r.audit_id: r.data.workflow_instance_id for r in sent} == {
        "never-seen-old": "wf-c",
        "never-seen-young": "wf-b",
        "seen-long-ago-older": "wf-e",
        "seen-long-ago": "wf-a",
        "seen-lately": "wf-d",
    }
    assert {(r.data.trigger, r.data.sweep_id, r.producer, r.occurred_at) for r in sent} == {
        (Trigger.WATCHDOG, tick.sweep_id, PRODUCER, NOW)
    }


async def test_a_tick_asks_about_at_most_the_batch_limit_in_order(pipeline: Pipeline) -> None:
    await given_a_mix_of_audits(pipeline.store)

    tick = await watchdog(pipeline, batch_limit=3).tick()

    assert [r.audit_id for r in tick.candidates] == [
        "never-seen-old",
        "never-seen-young",
        "seen-long-ago-older",
    ]
    assert [r.audit_id for r in await requested(pipeline)] == sorted(
        ["never-seen-old", "never-seen-young", "seen-long-ago-older"]
    )


async def test_a_dry_run_selects_without_asking(pipeline: Pipeline) -> None:
    await given_a_mix_of_audits(pipeline.store)

    tick = await watchdog(pipeline).tick(dry_run=True)

    assert len(tick.candidates) == 5
    assert tick.requests == []
    assert await requested(pipeline) == []


async def test_a_tick_while_another_process_ticks_is_skipped(pipeline: Pipeline) -> None:
    # given a stale audit, and another process's watchdog in the middle of its tick
    await project(pipeline.store, [started("stale", at(0))])
    dog = watchdog(pipeline)
    async with pipeline.other_store() as other, other.coordination.watchdog_lock() as held:
        assert held

        # when this process's watchdog ticks at the same time
        tick = await dog.tick()

        # then it is skipped: no candidates, no requests
        assert tick.skipped
        assert (tick.candidates, tick.requests, dog.ticks) == ([], [], 0)
        assert await requested(pipeline) == []

    # and once the other tick is over, the next tick runs
    again = await dog.tick()
    assert not again.skipped and [r.audit_id for r in again.candidates] == ["stale"]
    assert [r.audit_id for r in await requested(pipeline)] == ["stale"]


async def test_step_ticks_once_per_interval(pipeline: Pipeline) -> None:
    await project(pipeline.store, [started("stale-1", at(0)), started("stale-2", at(1))])
    dog = watchdog(pipeline)

    assert await dog.step() == 2  # the first step ticks
    assert await dog.step() == 0  # the next one is 5 minutes away
    assert dog.ticks == 1
    assert len(await requested(pipeline)) == 2


async def test_watchdogs_of_several_processes_tick_once_per_interval_between_them(
    pipeline: Pipeline,
) -> None:
    # given three processes' watchdogs on one store, their clocks in one interval slot
    await project(pipeline.store, [started("stale-1", at(0)), started("stale-2", at(1))])
    now = [NOW]
    dogs = [
        Watchdog(
            pipeline.log,
            pipeline.store,
            stale_after=timedelta(minutes=15),
            interval=timedelta(minutes=5),
            batch_limit=100,
            clock=lambda: now[0],
            owner=f"process-{i}",
        )
        for i in range(3)
    ]

    # when each steps as soon as it may, in this interval and then in the next
    first = [await dog.step() for dog in dogs]
    for dog in dogs:
        dog._next = 0.0  # each looks again at once, as when its timer fires
    now[0] = NOW + timedelta(minutes=5)
    second = [await dog.step() for dog in dogs]

    # then each interval has exactly one tick, whichever process made it
    assert sorted(first) == [0, 0, 2]
    assert sorted(second) == [0, 0, 2]
    assert sum(dog.ticks for dog in dogs) == 2
    assert len(await requested(pipeline)) == 4  # each stale audit asked about once a tick


async def test_report_counts_the_stalled_and_those_cloudflare_may_forget(
    pipeline: Pipeline,
) -> None:
    # given a retention of 4 hours (half of it: 2 hours before NOW, at(0)), and running
    # audits unobserved since before that, observed since, stalled, and one that ended
    await project(
        pipeline.store,
        [
            started("never-seen-old", at(-150)),  # at risk: never observed, started before
            started("seen-long-ago", at(-200)),
            observed("seen-long-ago", "running", at(-130)),  # at risk: last seen before
            started("seen-lately", at(-200)),
            observed("seen-lately", "running", at(60)),
            started("stalled", at(10)),
            stall("stalled", at(100)),
            started("ended", at(-300)),
            completed("ended", at(-290)),
        ],
    )
    dog = Watchdog(
        pipeline.log,
        pipeline.store,
        stale_after=timedelta(minutes=15),
        interval=timedelta(minutes=5),
        batch_limit=100,
        clock=lambda: NOW,
        cloudflare_retention=timedelta(hours=4),
    )

    # when the watchdog refreshes its gauges
    await dog.report()

    # then they count the stalled audit and the two Cloudflare may have forgotten
    assert REGISTRY.get_sample_value("auditrec_audits_stalled") == 1
    assert REGISTRY.get_sample_value("auditrec_audits_retention_at_risk") == 2

    # and the default retention (7 days) puts none at risk
    default = Watchdog(
        pipeline.log,
        pipeline.store,
        stale_after=timedelta(minutes=15),
        interval=timedelta(minutes=5),
        batch_limit=100,
        clock=lambda: NOW,
    )
    await default.report()
    assert REGISTRY.get_sample_value("auditrec_audits_retention_at_risk") == 0
