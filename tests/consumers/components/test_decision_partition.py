"""A decision is appended beside the events it was made from: to the partition they were read
from, whichever partitioner their publisher used. So the reconciler that rebuilds that
partition finds it, and a later observation of the audit it failed makes no second one."""

from __future__ import annotations

from consumers.components.reconciler import Reconciler
from consumers.eventlog.codec import decode, encode
from statemachine.events import AuditFailed
from statemachine.policy import Policy
from tests.contracts.projection_store import at, observed, started
from tests.pipeline import Pipeline, append_raw, lifecycle_events, read_topic, run_until_idle

OOM = "Worker exceeded memory limit"


async def test_a_decision_lands_in_its_audit_s_partition_and_is_made_once(
    pipeline: Pipeline,
) -> None:
    log, lifecycle = pipeline.log, pipeline.topics.lifecycle
    partitions = await log.inspection.partitions(lifecycle)
    # given an audit whose publisher put its events in another partition than the key's
    keyed = log.partition_for("elsewhere", len(partitions))
    chosen = partitions[(partitions.index(keyed) + 1) % len(partitions)]
    events = [
        started("elsewhere", instance="wf-e"),
        observed("elsewhere", "errored", at(60), instance="wf-e", error=OOM),
    ]
    await append_raw(log, [encode(lifecycle, e, chosen) for e in events])

    # when the reconciler decides
    async with Reconciler(log, Policy()) as reconciler:
        await run_until_idle(reconciler)

    # then its decision is in that partition
    records = [r for r in await read_topic(log, lifecycle) if r.key == "elsewhere"]
    assert {r.partition for r in records} == {chosen}
    assert [decode(r.value).type for r in records][-1] == "AuditFailed"

    # and a reconciler rebuilding the partition knows the audit failed: a later observation
    # of the dead instance makes no second decision
    later = observed("elsewhere", "errored", at(90), instance="wf-e", error=OOM)
    await append_raw(log, [encode(lifecycle, later, chosen)])
    async with Reconciler(log, Policy()) as restarted:
        await run_until_idle(restarted)
    decided = [
        e
        for e in await lifecycle_events(log, at_least=4)
        if isinstance(e, AuditFailed) and e.audit_id == "elsewhere"
    ]
    assert len(decided) == 1
