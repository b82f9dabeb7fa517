"""The orphan scan on each backend pair, against the Workflows simulator over HTTP: instances
of two watched workflows, some held by audits published and projected, some not, some created
before the watch began, some too young; scans find the orphans by the listing, once per
interval across watchdogs, spending listing pages only when the watchdog's listing does not
reach back far enough."""

from __future__ import annotations

from datetime import timedelta

from consumers.components.orphans import OrphanScan
from consumers.components.projector import Projector
from consumers.components.watchdog import Watchdog
from consumers.workflows.client import WorkflowsClient
from consumers.workflows.discovery import Discovery
from consumers.workflows.simulator.server import SimulatorServer
from consumers.workflows.simulator.state import LISTING
from projections.store import ProjectionStore
from statemachine.vocabulary import LISTED_ALIVE_STATUSES
from tests.contracts.projection_store import at, started
from tests.orphaned import instance, orphans_metric, pages_metric
from tests.pipeline import Pipeline, append, run_until_idle

WF, EXPORT = "site-audit", "site-export"
NOW = at(120)
GRACE = timedelta(minutes=10)


def scanner(
    store: ProjectionStore, client: WorkflowsClient, owner: str = "p-1", per_page: int = 2
) -> OrphanScan:
    return OrphanScan(
        store, client, workflows=[WF, EXPORT], grace=GRACE, interval=timedelta(hours=1),
        owner=owner, per_page=per_page, clock=lambda: NOW,
    )  # fmt: skip


async def given_instances(pipeline: Pipeline, sim: SimulatorServer) -> None:
    """Watched since at(0): in site-audit an instance from before the watch, one an audit
    holds, two orphans (one id with a slash and a space, one paused), one too young, one
    ended; in site-export an orphan and one held by an audit of that workflow."""
    await pipeline.store.orphans.watch([WF, EXPORT], at(0))
    for workflow, iid, status, created in [
        (WF, "old-1", "running", at(-60)),
        (WF, "held-1", "running", at(10)),
        (WF, "orphan-1", "running", at(20)),
        (WF, "orphan 2/x", "paused", at(30)),
        (WF, "young-1", "running", at(115)),
        (WF, "done-1", "complete", at(20)),
        (EXPORT, "exp-1", "queued", at(40)),
        (EXPORT, "exp-held", "running", at(40)),
    ]:
        await instance(sim, workflow, iid, status, created)
    await publish(pipeline, [("a-held", "held-1", None), ("a-exp", "exp-held", EXPORT)])


async def publish(pipeline: Pipeline, audits: list[tuple[str, str, str | None]]) -> None:
    """Audits holding instances, published to the log and projected."""
    events = [
        started(audit, at(10), instance=iid, **({"workflow": wf} if wf else {}))
        for audit, iid, wf in audits
    ]
    await append(pipeline.log, pipeline.topics.lifecycle, events)
    projector = Projector(pipeline.log, pipeline.store.writer)
    await projector.start()
    try:
        await run_until_idle(projector)
    finally:
        await projector.stop()


async def open_orphans(store: ProjectionStore) -> set[tuple[str, str]]:
    return {(o.workflow, o.instance_id) for o in await store.orphans.page()}


async def test_a_scan_finds_the_orphans_by_the_listing(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    # given instances of two watched workflows
    await given_instances(pipeline, simulator)
    pages = {wf: pages_metric(wf) for wf in (WF, EXPORT)}

    # when a scan runs (the listing paged two instances at a time)
    records = await scanner(pipeline.store, client).scan(NOW)

    # then the orphans are those alive, unheld, created after the watch and past the grace
    assert records is not None and set(records) == {WF, EXPORT}
    assert await open_orphans(pipeline.store) == {
        (WF, "orphan-1"), (WF, "orphan 2/x"), (EXPORT, "exp-1"),
    }  # fmt: skip
    paused = await pipeline.store.orphans.get(WF, "orphan 2/x")
    assert paused is not None and paused.status == "paused" and paused.created_on == at(30)
    assert paused.first_seen == NOW
    assert (orphans_metric(WF), orphans_metric(EXPORT)) == (2, 1)
    # and each page of the listing is counted: site-audit's running has 3 alive instances
    # since the watch (2 pages), every other alive status one page each
    statuses = len(LISTED_ALIVE_STATUSES)
    spent = {wf: pages_metric(wf) - pages[wf] for wf in (WF, EXPORT)}
    assert spent == {WF: statuses + 1, EXPORT: statuses}
    assert simulator.sim.stats()["by_instance"][LISTING] == 2 * statuses + 1


async def test_on_a_first_deployment_no_older_instance_is_an_orphan(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    # given alive instances without audits, all created before auditrec watched
    for iid, created in (("before-1", at(-300)), ("before-2", at(100))):
        await instance(simulator, WF, iid, "running", created)

    # when the first scan registers the workflows now: nothing is older than the watch and
    # past the grace, and nothing is listed
    first = await scanner(pipeline.store, client).scan(NOW)
    assert first == {}
    assert (await pipeline.store.orphans.watched())[WF] == NOW
    assert "@instances" not in simulator.sim.stats()["by_instance"]

    # then two hours later only an instance created after the watch is one
    later = NOW + timedelta(hours=2)
    await instance(simulator, WF, "after-1", "running", NOW + timedelta(minutes=30))
    scan = scanner(pipeline.store, client)
    scan.clock = lambda: later
    records = await scan.scan(later)
    assert records is not None and records[WF].found == ["after-1"]
    assert await open_orphans(pipeline.store) == {(WF, "after-1")}


async def test_orphans_not_listed_alive_again_are_gone_or_adopted(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    await given_instances(pipeline, simulator)
    await scanner(pipeline.store, client).scan(NOW)

    # when one orphan ends and an audit turns up holding another, and the next interval scans
    await instance(simulator, WF, "orphan-1", "complete", at(20))
    await publish(pipeline, [("a-late", "orphan 2/x", None)])
    records = await scanner(pipeline.store, client).scan(NOW + timedelta(hours=1))

    # then both are gone, the adopted one said so in its history; the young one is past
    # the grace now, an orphan
    assert records is not None
    record = records[WF]
    assert (record.found, record.gone, record.adopted, record.open) == (
        ["young-1"], ["orphan-1"], ["orphan 2/x"], 1,
    )  # fmt: skip
    history = await pipeline.store.orphans.history(WF, "orphan 2/x")
    assert [e.kind for e in history] == ["found", "adopted"]
    assert orphans_metric(WF) == 1


async def test_a_failed_listing_marks_nothing_gone(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    await given_instances(pipeline, simulator)
    await scanner(pipeline.store, client).scan(NOW)
    simulator.sim.set_fault(LISTING, "server_error")

    records = await scanner(pipeline.store, client).scan(NOW + timedelta(hours=1))

    assert records == {}
    assert len(await open_orphans(pipeline.store)) == 3


def watchdog(
    pipeline: Pipeline, store: ProjectionStore, scan: OrphanScan, discovery: Discovery | None = None
) -> Watchdog:
    return Watchdog(
        pipeline.log, store, stale_after=timedelta(minutes=15), interval=timedelta(hours=1),
        batch_limit=100, clock=lambda: NOW, owner=scan.owner, discovery=discovery, orphans=scan,
    )  # fmt: skip


async def test_one_scan_per_interval_across_two_watchdogs(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    await given_instances(pipeline, simulator)
    pages = pages_metric(WF) + pages_metric(EXPORT)
    async with pipeline.other_store() as other:
        scans = [scanner(pipeline.store, client, "p-1"), scanner(other, client, "p-2")]
        dogs = [watchdog(pipeline, pipeline.store, scans[0]), watchdog(pipeline, other, scans[1])]

        # when both watchdogs step, twice, in the same interval
        for dog in dogs * 2:
            await dog.step()

    # then one of them scanned, once, and listed each workflow once
    assert sum(s.scans for s in scans) == 1
    assert pages_metric(WF) + pages_metric(EXPORT) - pages == 2 * len(LISTED_ALIVE_STATUSES) + 1
    assert len(await open_orphans(pipeline.store)) == 3


async def test_a_scan_shares_the_pages_of_the_watchdogs_listing_that_reaches_back(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    # given stale audits of site-audit started at the watch's start (their listing reaches
    # back an hour before), and none of site-export
    await given_instances(pipeline, simulator)
    await publish(pipeline, [(f"a-{i}", f"run-{i}", None) for i in range(6)])
    for i in range(6):
        await instance(simulator, WF, f"run-{i}", "running", at(10))
    pages = {wf: pages_metric(wf) for wf in (WF, EXPORT)}
    listed = simulator.sim.stats()["by_instance"].get(LISTING, 0)
    scan = scanner(pipeline.store, client)
    dog = watchdog(pipeline, pipeline.store, scan, Discovery(client, limit=1000, per_page=100))

    # when the watchdog steps: its tick lists site-audit, then the orphan scan runs
    await dog.step()

    # then the scan requested no page of site-audit's, its own pages of site-export's only
    assert scan.scans == 1 and dog.ticks == 1
    spent = {wf: pages_metric(wf) - pages[wf] for wf in (WF, EXPORT)}
    statuses = len(LISTED_ALIVE_STATUSES)
    assert spent == {WF: 0, EXPORT: statuses}
    assert simulator.sim.stats()["by_instance"][LISTING] - listed == 2 * statuses  # tick, scan
    assert await open_orphans(pipeline.store) == {
        (WF, "orphan-1"), (WF, "orphan 2/x"), (EXPORT, "exp-1"),
    }  # fmt: skip


async def test_the_watchdog_lists_each_workflow_and_looks_instances_up_in_their_own(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    # given stale audits in two workflows, and one instance id in both, alive in each with
    # another status
    audits: list[tuple[str, str, str | None]] = []
    for workflow, status in ((WF, "running"), (EXPORT, "paused")):
        for i in range(5):
            await instance(simulator, workflow, f"{workflow}-{i}", status, at(5))
            audits.append((f"a-{workflow}-{i}", f"{workflow}-{i}", workflow))
        await instance(simulator, workflow, "same-1", status, at(5))
        audits.append((f"a-{workflow}-same", "same-1", workflow))
    await publish(pipeline, audits)
    before = simulator.sim.stats()["by_instance"].get(LISTING, 0)
    dog = watchdog(
        pipeline, pipeline.store, scanner(pipeline.store, client), Discovery(client, limit=100)
    )

    # when the watchdog ticks
    tick = await dog.tick()

    # then each workflow was listed once, and each request carries its own workflow's status
    assert tick.listings is not None and set(tick.listings.by_workflow) == {WF, EXPORT}
    pages = simulator.sim.stats()["by_instance"][LISTING] - before
    assert pages == 2 * len(LISTED_ALIVE_STATUSES)
    listed = {
        r.audit_id: (r.data.workflow, r.data.listed.status if r.data.listed else None)
        for r in tick.requests
    }
    assert listed[f"a-{WF}-same"] == (WF, "running")
    assert listed[f"a-{EXPORT}-same"] == (EXPORT, "paused")
    assert {status for _, status in listed.values()} == {"running", "paused"}
    assert tick.listings.listed_from[WF] == at(10) - timedelta(hours=1)


async def test_when_a_scan_is_due_the_watchdogs_listing_reaches_back_to_the_watch(
    pipeline: Pipeline, client: WorkflowsClient, simulator: SimulatorServer
) -> None:
    # given stale audits started long after the watch began (their own listing would begin an
    # hour before them, later than the watch)
    await pipeline.store.orphans.watch([WF, EXPORT], at(0))
    await instance(simulator, WF, "orphan-1", "running", at(20))
    for i in range(6):
        await instance(simulator, WF, f"late-{i}", "running", at(100))
    events = [started(f"late-{i}", at(100), instance=f"late-{i}") for i in range(6)]
    await append(pipeline.log, pipeline.topics.lifecycle, events)
    projector = Projector(pipeline.log, pipeline.store.writer)
    await projector.start()
    try:
        await run_until_idle(projector)
    finally:
        await projector.stop()
    pages = pages_metric(WF)
    scan = scanner(pipeline.store, client)
    dog = watchdog(pipeline, pipeline.store, scan, Discovery(client, limit=1000, per_page=100))

    # when the watchdog steps with a scan due
    await dog.step()

    # then its listing of site-audit began at the watch, and the scan read none of its own
    assert scan.scans == 1
    assert pages_metric(WF) - pages == 0
    assert await open_orphans(pipeline.store) == {(WF, "orphan-1")}
