"""The contract of :class:`~projections.orphans.OrphanInstances`, the watched workflows and
their orphan instances: every adapter passes it unchanged.

Abstract (see :mod:`tests.contracts.projection_store` for what a backend provides).
"""

from __future__ import annotations

from datetime import UTC

import pytest

from projections.store import ProjectionStore
from projections.values import OrphanSighting
from tests.contracts.projection_store import CONSUMER, StoreFixtures, at, positioned, started

__all__ = ["OrphanInstancesContract"]

WF = "site-audit"
OTHER = "site-export"


def seen(instance_id: str, status: str = "running", minute: int = 0) -> OrphanSighting:
    return OrphanSighting(instance_id, status, at(minute))


def kinds(events: list) -> list[str]:  # type: ignore[type-arg]
    return [e.kind for e in events]


class OrphanInstancesContract(StoreFixtures):
    async def test_watch_registers_each_workflow_once_and_never_moves_it(
        self, store: ProjectionStore
    ) -> None:
        assert await store.orphans.watched() == {}
        first = await store.orphans.watch([WF], at(1))
        assert first == {WF: at(1)} and first[WF].tzinfo is not None
        # again later, with another one: the first keeps its time, the new one is now
        assert await store.orphans.watch([WF, OTHER, OTHER], at(5)) == {WF: at(1), OTHER: at(5)}
        assert await store.orphans.watched() == {WF: at(1), OTHER: at(5)}
        assert await store.orphans.watch([], at(9)) == {}

    async def test_held_names_the_instances_an_audit_holds_whatever_its_status_or_workflow(
        self, store: ProjectionStore
    ) -> None:
        events = [
            started("a-1", at(0), instance="i-1"),
            started("a-2", at(0), instance="i/2 two", workflow=OTHER),
            started("a-3", at(0), instance=None),
        ]
        await store.writer.apply(positioned(events), {}, CONSUMER)
        assert await store.orphans.held(["i-1", "i/2 two", "i-9", "i-1"]) == {"i-1", "i/2 two"}
        assert await store.orphans.held([]) == set()

    async def test_a_scan_records_new_orphans_open_with_their_history(
        self, store: ProjectionStore
    ) -> None:
        record = await store.orphans.record_scan(
            WF, [seen("i-1", minute=-30), seen("i 2/x", "paused", -20)], at(10)
        )
        assert sorted(record.found) == ["i 2/x", "i-1"]
        assert record.gone == [] and record.adopted == [] and record.open == 2
        orphan = await store.orphans.get(WF, "i-1")
        assert orphan is not None
        assert (orphan.workflow, orphan.instance_id, orphan.status, orphan.state) == (
            WF, "i-1", "running", "open",
        )  # fmt: skip
        assert orphan.created_on == at(-30) and orphan.created_on.tzinfo is not None
        assert orphan.first_seen == orphan.last_seen == at(10)
        assert orphan.terminated_by is None and orphan.result is None
        assert await store.orphans.get(OTHER, "i-1") is None
        history = await store.orphans.history(WF, "i 2/x")
        assert kinds(history) == ["found"] and history[0].detail == "paused"
        assert history[0].at.astimezone(UTC) == at(10)
        assert await store.orphans.history(WF, "nope") == []
        assert await store.orphans.open_counts() == {WF: 2}

    async def test_a_later_scan_moves_last_seen_and_notes_a_new_status_only(
        self, store: ProjectionStore
    ) -> None:
        await store.orphans.record_scan(WF, [seen("i-1"), seen("i-2")], at(10))
        record = await store.orphans.record_scan(WF, [seen("i-1"), seen("i-2", "paused")], at(70))
        assert record.found == [] and record.open == 2
        one, two = await store.orphans.get(WF, "i-1"), await store.orphans.get(WF, "i-2")
        assert one is not None and two is not None
        assert (one.first_seen, one.last_seen) == (at(10), at(70))
        assert two.status == "paused"
        assert kinds(await store.orphans.history(WF, "i-1")) == ["found"]
        assert kinds(await store.orphans.history(WF, "i-2")) == ["found", "seen"]

    async def test_open_orphans_not_listed_again_are_gone_or_adopted_and_may_return(
        self, store: ProjectionStore
    ) -> None:
        await store.orphans.record_scan(WF, [seen("i-1"), seen("i-2"), seen("i-3")], at(10))
        await store.orphans.record_scan(OTHER, [seen("i-1")], at(10))
        # an audit holds i-2 now (published late)
        await store.writer.apply(positioned([started("a-2", at(5), instance="i-2")]), {}, CONSUMER)

        record = await store.orphans.record_scan(WF, [seen("i-3")], at(70))

        assert (record.found, record.gone, record.adopted, record.open) == ([], ["i-1"], ["i-2"], 1)
        gone = await store.orphans.get(WF, "i-1")
        assert gone is not None and gone.state == "gone" and gone.last_seen == at(10)
        assert kinds(await store.orphans.history(WF, "i-2")) == ["found", "adopted"]
        # another workflow's orphans are untouched
        other = await store.orphans.get(OTHER, "i-1")
        assert other is not None and other.state == "open"
        assert await store.orphans.open_counts() == {WF: 1, OTHER: 1}

        # a gone one listed alive again is open again
        record = await store.orphans.record_scan(WF, [seen("i-1"), seen("i-3")], at(130))
        assert record.found == ["i-1"] and record.open == 2
        assert kinds(await store.orphans.history(WF, "i-1")) == ["found", "gone", "found"]

        # a scan that lists nothing ends them all
        record = await store.orphans.record_scan(WF, [], at(190))
        assert sorted(record.gone) == ["i-1", "i-3"] and record.open == 0
        assert await store.orphans.open_counts() == {OTHER: 1}

    async def test_page_lists_by_seq_per_workflow_and_state(self, store: ProjectionStore) -> None:
        await store.orphans.record_scan(WF, [seen("i-1"), seen("i-2"), seen("i-3")], at(10))
        await store.orphans.record_scan(OTHER, [seen("x-1")], at(11))
        await store.orphans.record_scan(WF, [seen("i-1"), seen("i-3")], at(20))

        def ids(page: list) -> list[str]:  # type: ignore[type-arg]
            return [o.instance_id for o in page]

        everything = await store.orphans.page()
        assert ids(everything) == ["i-1", "i-3", "x-1"]
        seqs = [o.seq for o in everything]
        assert seqs == sorted(seqs) and len(set(seqs)) == 3
        assert ids(await store.orphans.page(WF)) == ["i-1", "i-3"]
        assert ids(await store.orphans.page(WF, state="gone")) == ["i-2"]
        assert ids(await store.orphans.page(state=None)) == ["i-1", "i-2", "i-3", "x-1"]
        first = await store.orphans.page(limit=2)
        assert ids(first) == ["i-1", "i-3"]
        assert ids(await store.orphans.page(limit=2, after=first[-1].seq)) == ["x-1"]
        assert await store.orphans.page("nowhere") == []

    async def test_a_termination_is_asked_by_an_actor_then_answered(
        self, store: ProjectionStore
    ) -> None:
        await store.orphans.record_scan(WF, [seen("i-1"), seen("i-2"), seen("i-3")], at(10))

        before = await store.orphans.ask_termination(WF, "i-1", "cli:ops", "alice", at(20))
        assert before is not None and before.state == "open" and before.terminated_by is None
        asked = await store.orphans.get(WF, "i-1")
        assert asked is not None and asked.state == "open"
        assert (asked.terminated_by, asked.on_behalf_of, asked.result) == ("cli:ops", "alice", None)

        after = await store.orphans.termination_result(WF, "i-1", "terminated", None, at(21))
        assert after is not None and after.state == "terminated"
        assert (after.terminated_at, after.terminated_by, after.result) == (
            at(21), "cli:ops", "terminated",
        )  # fmt: skip
        history = await store.orphans.history(WF, "i-1")
        assert kinds(history) == ["found", "terminate_asked", "terminated"]
        assert (history[1].actor, history[1].on_behalf_of) == ("cli:ops", "alice")
        assert history[2].actor == "cli:ops"

        # a terminated orphan is asked for nothing more: it is given as it is
        again = await store.orphans.ask_termination(WF, "i-1", "token:ci", None, at(30))
        assert again is not None and again.state == "terminated"
        assert len(await store.orphans.history(WF, "i-1")) == 3
        assert await store.orphans.ask_termination(WF, "nope", "cli:ops", None, at(30)) is None

        # other answers: ended by itself (gone), or a failure (still open, asked again later)
        await store.orphans.ask_termination(WF, "i-2", "token:ci", None, at(40))
        ended = await store.orphans.termination_result(WF, "i-2", "already_ended", None, at(41))
        assert ended is not None and ended.state == "gone" and ended.result == "already_ended"
        await store.orphans.ask_termination(WF, "i-3", "token:ci", None, at(40))
        failed = await store.orphans.termination_result(
            WF, "i-3", "failed", "HTTP 500 (server_error)", at(41)
        )
        assert failed is not None and failed.state == "open" and failed.terminated_at is None
        assert failed.result == "failed: HTTP 500 (server_error)"
        assert (await store.orphans.history(WF, "i-3"))[-1].detail == "HTTP 500 (server_error)"
        assert await store.orphans.open_counts() == {WF: 1}
        assert await store.orphans.termination_result(WF, "nope", "failed", "x", at(41)) is None
        with pytest.raises(ValueError):
            await store.orphans.termination_result(WF, "i-3", "exploded", None, at(42))

    async def test_a_scan_keeps_a_terminated_orphan_terminated(
        self, store: ProjectionStore
    ) -> None:
        await store.orphans.record_scan(WF, [seen("i-1")], at(10))
        await store.orphans.ask_termination(WF, "i-1", "cli:ops", None, at(20))
        await store.orphans.termination_result(WF, "i-1", "terminated", None, at(21))
        record = await store.orphans.record_scan(WF, [seen("i-1")], at(30))
        assert record.found == [] and record.gone == [] and record.open == 0
        orphan = await store.orphans.get(WF, "i-1")
        assert orphan is not None and orphan.state == "terminated" and orphan.last_seen == at(30)
        await store.orphans.record_scan(WF, [], at(40))
        orphan = await store.orphans.get(WF, "i-1")
        assert orphan is not None and orphan.state == "terminated"
