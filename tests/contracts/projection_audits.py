"""The contract of :class:`~projections.audits.AuditReads`, the read model: rows, pages, counts and
summaries, histories, events by cause: every adapter passes it unchanged.

Abstract (see :mod:`tests.contracts.projection_store` for what a backend provides).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from projections.audits import SORTS, ended_at, sort_key
from projections.row import AuditRow
from projections.store import ProjectionStore
from statemachine.events import AuditEvent
from tests.contracts.projection_store import (
    CONSUMER,
    T0,
    StoreFixtures,
    assert_utc,
    at,
    attached,
    completed,
    failed,
    held,
    lifecycle_mix,
    next_offsets,
    observed,
    positioned,
    probe_failed,
    progressed,
    released,
    simulated,
    stall,
    started,
)

__all__ = ["AuditReadsContract"]


class AuditReadsContract(StoreFixtures):
    async def test_get_an_unknown_audit_is_none(self, store: ProjectionStore) -> None:
        assert await store.audits.get("a-nope") is None

    async def test_timestamps_round_trip_exactly_as_utc(self, store: ProjectionStore) -> None:
        ist = timezone(timedelta(hours=5, minutes=30))
        start_at = datetime(2026, 11, 30, 13, 30, 1, 123456, tzinfo=ist)
        seen_at = datetime(2026, 11, 30, 8, 45, 59, 999999, tzinfo=UTC)
        done_at = datetime(2031, 1, 2, 3, 4, 5, 1, tzinfo=timezone(timedelta(hours=-7)))
        start = started("a-ts", start_at, started_at=start_at)
        look = observed("a-ts", "running", seen_at)
        done = completed("a-ts", seen_at, completed_at=done_at)
        await store.writer.apply(positioned([start, look, done]), {}, CONSUMER)
        row = await store.audits.get("a-ts")
        assert row is not None
        for stored, original in (
            (row.state.started_at, start_at),
            (row.state.last_observed_at, seen_at),
            (row.state.completed_at, done_at),
        ):
            assert_utc(stored)
            assert stored == original
            assert stored is not None and stored.microsecond == original.astimezone(UTC).microsecond
        history = await store.audits.history("a-ts")
        assert [h.event for h in history] == [start, look, done]
        assert history[0].event.occurred_at == start_at

    async def test_a_failed_audit_has_its_failure_time_and_no_completion_time(
        self, store: ProjectionStore
    ) -> None:
        # given the lifecycle mix: a workflow's failure, a reconciler's failure overturned
        await store.writer.apply(positioned(lifecycle_mix()), {}, CONSUMER)

        # then the failed audit has failed_at (its failure's time) and no completed_at
        failed_row = await store.audits.get("a-fail")
        assert failed_row is not None and failed_row.status == "failed"
        assert (failed_row.state.failed_at, failed_row.state.completed_at) == (at(12), None)
        assert_utc(failed_row.state.failed_at)
        # and the overturned one completed: its completion's time, the failure's cleared
        over = await store.audits.get("a-over")
        assert over is not None and over.status == "completed" and over.state.overturned
        assert (over.state.completed_at, over.state.failed_at) == (at(16), None)
        # and a completion has completed_at alone
        done = await store.audits.get("a-done")
        assert done is not None and (done.state.completed_at, done.state.failed_at) == (
            at(10),
            None,
        )

    async def test_history_is_in_log_order_with_positions(self, store: ProjectionStore) -> None:
        events = lifecycle_mix()
        batch = positioned(events)
        await store.writer.apply(batch[:7], {}, CONSUMER)
        await store.writer.apply(batch[7:], {}, CONSUMER)
        for audit_id in ("a-run", "a-done", "a-fail", "a-over"):
            expected = [(e, p) for e, p in batch if e.audit_id == audit_id]
            history = await store.audits.history(audit_id)
            assert [(h.event, h.position) for h in history] == expected
            for entry in history:
                assert_utc(entry.recorded_at)
        assert await store.audits.history("a-unknown") == []

    async def test_caused_by_finds_the_recorded_consequences(self, store: ProjectionStore) -> None:
        cause_1, cause_2, cause_3 = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
        look = observed("a-1", "running", at(20), causation_id=cause_1)
        other = observed("a-2", "running", at(21), causation_id=cause_2)
        gave_up = probe_failed("a-1", at(22), causation_id=cause_1)
        unrelated = observed("a-1", "running", at(23), causation_id=cause_3)
        events: list[AuditEvent] = [started("a-1"), started("a-2"), look, other, gave_up, unrelated]
        await store.writer.apply(positioned(events), {}, CONSUMER)
        assert await store.audits.caused_by([str(cause_1), str(cause_2)]) == [look, other, gave_up]
        assert await store.audits.caused_by([str(uuid.uuid4())]) == []
        assert await store.audits.caused_by([]) == []

    async def test_list_audits_newest_first_with_status_filter(
        self, store: ProjectionStore
    ) -> None:
        events: list[AuditEvent] = [
            started("a-1", at(1)),
            started("a-2", at(2)),
            started("a-3", at(3)),
            started("a-4", at(3)),  # same start as a-3: audit_id breaks the tie
            started("a-5", at(5)),
            completed("a-2", at(6)),
            failed("a-5", at(7)),
        ]
        await store.writer.apply(positioned(events), {}, CONSUMER)
        ids = [r.audit_id for r in await store.audits.list_audits()]
        assert ids == ["a-5", "a-4", "a-3", "a-2", "a-1"]
        running = await store.audits.list_audits(status="running")
        assert [r.audit_id for r in running] == ["a-4", "a-3", "a-1"]
        assert all(r.status == "running" for r in running)
        assert [r.audit_id for r in await store.audits.list_audits(status="failed")] == ["a-5"]
        assert await store.audits.list_audits(status="nope") == []
        assert [r.audit_id for r in await store.audits.list_audits(limit=2)] == ["a-5", "a-4"]

    async def test_list_audits_keyset_pages_neither_overlap_nor_skip(
        self, store: ProjectionStore
    ) -> None:
        # 23 audits, many sharing a start time; some completed
        events: list[AuditEvent] = [started(f"a-{i:02d}", at(i // 3)) for i in range(23)]
        events += [completed(f"a-{i:02d}", at(30)) for i in range(0, 23, 4)]
        await store.writer.apply(positioned(events), {}, CONSUMER)
        for status in (None, "running"):
            everything = await store.audits.list_audits(status=status, limit=1000)
            pages: list[list[AuditRow]] = []
            after: tuple[datetime, str] | None = None
            while True:
                page = await store.audits.list_audits(status=status, limit=4, after=after)
                if not page:
                    break
                pages.append(page)
                last = page[-1]
                assert last.state.started_at is not None
                after = (last.state.started_at, last.audit_id)
            flat = [r.audit_id for page in pages for r in page]
            assert flat == [r.audit_id for r in everything]
            assert len(flat) == len(set(flat))
            keys = [(r.state.started_at, r.audit_id) for r in everything]
            assert keys == sorted(keys, reverse=True)
        assert len(await store.audits.list_audits(limit=1000)) == 23
        assert len(await store.audits.list_audits(status="running", limit=1000)) == 17

    async def test_list_audits_searches_ids_instances_projects_and_url_beginnings(
        self, store: ProjectionStore
    ) -> None:
        def audit(i: int, url: str) -> AuditEvent:
            return started(f"a-s{i}", at(i), f"wf-s{i}", project_id=f"p-s{i}", start_url=url)

        events: list[AuditEvent] = [
            audit(1, "https://shop.example/a"),
            audit(2, "https://shop.example/b"),
            audit(3, "http://blog.example/shop.example"),
            audit(4, "https://other.example/"),
            failed("a-s2", at(9)),
        ]
        await store.writer.apply(positioned(events), {}, CONSUMER)

        async def found(q: str, **filters: Any) -> list[str]:
            rows = await store.audits.list_audits(q=q, **filters)
            assert await store.audits.count_audits(q=q, **filters) == len(rows)
            return [r.audit_id for r in rows]

        assert await found("a-s3") == ["a-s3"]  # an audit id, exactly
        assert await found("a-s") == []
        assert await found("wf-s4") == ["a-s4"]  # a workflow instance id
        assert await found("p-s1") == ["a-s1"]  # a project id
        assert await found("https://shop.example/") == ["a-s2", "a-s1"]  # a URL's beginning
        assert await found("shop.example") == ["a-s2", "a-s1"]  # under https:// or http://
        assert await found("blog.example/shop") == ["a-s3"]
        assert await found("example") == []  # not a substring: the beginning only
        assert await found("shop.example", status="failed") == ["a-s2"]
        assert await found("shop.example", status="running") == ["a-s1"]
        assert await store.audits.count_audits() == 4
        assert await store.audits.count_audits(status="running") == 3

    async def test_list_audits_held_filter(self, store: ProjectionStore) -> None:
        ended_hold = held("a-h3", at(6))
        events: list[AuditEvent] = [
            started("a-h1", at(1)),
            started("a-h2", at(2)),
            started("a-h3", at(3)),
            held("a-h2", at(5)),
            ended_hold,
            released(ended_hold, at(7)),
        ]
        await store.writer.apply(positioned(events), {}, CONSUMER)
        holding = await store.audits.list_audits(held=True)
        assert [r.audit_id for r in holding] == ["a-h2"]
        assert holding[0].state.held_decision_id is not None
        free = await store.audits.list_audits(held=False)
        assert [r.audit_id for r in free] == ["a-h3", "a-h1"]
        assert await store.audits.count_audits(held=True) == 1
        assert await store.audits.count_audits(held=False) == 2

    async def test_list_audits_workflow_filter_counts_unnamed_audits_as_the_default(
        self, store: ProjectionStore
    ) -> None:
        # given audits naming no workflow (the default), the default by name, and another
        events: list[AuditEvent] = [
            started("a-w1", at(1)),
            started("a-w2", at(2), workflow="site-audit"),
            started("a-w3", at(3), workflow="keyword-research"),
            started("a-w4", at(4), workflow="keyword-research"),
            started("a-w5", at(5), workflow="site-audit-2"),
            failed("a-w4", at(6)),
        ]
        await store.writer.apply(positioned(events), {}, CONSUMER)

        async def found(**filters: Any) -> list[str]:
            rows = await store.audits.list_audits(**filters)
            assert await store.audits.count_audits(**filters) == len(rows)
            return [r.audit_id for r in rows]

        # then the default workflow's are those naming it and those naming none
        default = {"workflow": "site-audit", "default_workflow": "site-audit"}
        assert await found(**default) == ["a-w2", "a-w1"]
        # and, when it is not the default, those naming it alone
        assert await found(workflow="site-audit") == ["a-w2"]
        assert await found(workflow="keyword-research", default_workflow="site-audit") == [
            "a-w4",
            "a-w3",
        ]
        assert await found(workflow="keyword-research", status="running") == ["a-w3"]
        assert await found(workflow="nothing-here", default_workflow="site-audit") == []
        # and a stored row keeps what its start named, NULL for none
        row = await store.audits.get("a-w1")
        assert row is not None and row.state.workflow is None
        # and the workflows named are each listed once
        assert await store.audits.workflows() == ["keyword-research", "site-audit", "site-audit-2"]
        assert await store.audits.workflows(limit=2) == ["keyword-research", "site-audit"]

    async def test_list_audits_stalled_filter_and_the_running_stalled_count(
        self, store: ProjectionStore
    ) -> None:
        # given two audits with a stall verdict, one stalled then progressed, one stalled then
        # failed, and one never stalled
        events: list[AuditEvent] = [
            started("a-st1", at(1)),
            started("a-st2", at(2)),
            started("a-st3", at(3)),
            started("a-st4", at(4)),
            started("a-ok", at(5)),
            stall("a-st1", at(20)),
            stall("a-st2", at(21)),
            stall("a-st3", at(22)),
            progressed("a-st3", at(23), pages_crawled=9),
            stall("a-st4", at(24)),
            failed("a-st4", at(25)),
            simulated("a-ok", at(26)),  # another rule's verdict: not a stall
        ]
        await store.writer.apply(positioned(events), {}, CONSUMER)

        async def found(**filters: Any) -> list[str]:
            rows = await store.audits.list_audits(**filters)
            assert await store.audits.count_audits(**filters) == len(rows)
            return [r.audit_id for r in rows]

        # then the stalled are those whose verdict still stands, since the verdict's time
        assert await found(stalled=True) == ["a-st2", "a-st1"]
        row = await store.audits.get("a-st1")
        assert row is not None and row.state.stalled_at == at(20)
        assert_utc(row.state.stalled_at)
        assert await found(stalled=False) == ["a-ok", "a-st4", "a-st3"]
        assert await found(stalled=True, workflow="site-audit", default_workflow="site-audit") == [
            "a-st2",
            "a-st1",
        ]
        assert await store.audits.count_stalled() == 2

    async def test_count_retention_at_risk_counts_running_audits_unseen_since_a_time(
        self, store: ProjectionStore
    ) -> None:
        assert await store.audits.count_retention_at_risk(at(100)) == 0
        events: list[AuditEvent] = [
            started("never-seen-old", at(0)),  # at risk: started before, never observed
            started("never-seen-new", at(50)),  # started after: not yet
            started("seen-long-ago", at(0)),
            observed("seen-long-ago", "running", at(10)),  # at risk: last seen before
            started("seen-lately", at(0)),
            observed("seen-lately", "running", at(10)),
            observed("seen-lately", "running", at(45)),  # seen after: not at risk
            started("ended", at(0)),
            completed("ended", at(5)),  # not running: nothing to lose
        ]
        await store.writer.apply(positioned(events), {}, CONSUMER)
        assert await store.audits.count_retention_at_risk(at(40)) == 2
        assert await store.audits.count_retention_at_risk(at(10)) == 1  # strictly before
        assert await store.audits.count_retention_at_risk(at(60)) == 4
        assert await store.audits.count_retention_at_risk(at(0)) == 0

    async def test_list_audits_each_sort_pages_forwards_and_back_without_loss(
        self, store: ProjectionStore
    ) -> None:
        # 20 audits, starts shared by threes; some completed, some failed, at shared times
        events: list[AuditEvent] = [started(f"a-{i:02d}", at(i // 3)) for i in range(20)]
        events += [completed(f"a-{i:02d}", at(30 + i % 3)) for i in range(0, 20, 4)]
        events += [failed(f"a-{i:02d}", at(30 + i % 4)) for i in range(1, 20, 6)]
        await store.writer.apply(positioned(events), {}, CONSUMER)
        now = at(60)
        for sort in SORTS:
            for descending in (True, False):
                everything = await store.audits.list_audits(
                    limit=1000, sort=sort, descending=descending, now=now
                )
                keys = [sort_key(r, sort, descending, now) for r in everything]
                assert keys == sorted(keys, reverse=descending), (sort, descending)
                assert len(everything) == 20
                walk: list[str] = []
                after: tuple[Any, ...] | None = None
                while True:
                    page = await store.audits.list_audits(
                        limit=3, after=after, sort=sort, descending=descending, now=now
                    )
                    if not page:
                        break
                    walk += [r.audit_id for r in page]
                    after = sort_key(page[-1], sort, descending, now)
                assert walk == [r.audit_id for r in everything], (sort, descending)
                back: list[str] = []
                while after is not None:  # from the last row, backwards
                    page = await store.audits.list_audits(
                        limit=3,
                        after=after,
                        sort=sort,
                        descending=descending,
                        now=now,
                        backwards=True,
                    )
                    back += [r.audit_id for r in page]
                    after = sort_key(page[-1], sort, descending, now) if page else None
                assert back == walk[-2::-1], (sort, descending)
        ended = await store.audits.list_audits(limit=1000, sort="ended")
        finished = [r for r in ended if ended_at(r) is not None]
        assert len(finished) == 9
        assert ended[:9] == finished  # unfinished last, the latest end first
        assert ended_at(finished[0]) == at(33)
        oldest = await store.audits.list_audits(limit=3, sort="age", now=now)
        assert [r.audit_id for r in oldest] == ["a-02", "a-05", "a-03"]  # running 60, 59, 59
        # a finished audit's age is its run, start to end (26 to 31 minutes), not until now:
        # shorter than any still running (54 minutes or more)
        shortest = await store.audits.list_audits(limit=9, sort="age", descending=False, now=now)
        assert {r.audit_id for r in shortest} == {r.audit_id for r in finished}

    async def test_stale_running_order_limit_and_filters(self, store: ProjectionStore) -> None:
        events: list[AuditEvent] = [
            started("never-old", at(0)),
            started("never-young", at(10)),
            started("seen-late", at(1)),
            started("seen-early", at(5)),
            started("seen-early-b", at(4)),  # same observation time, older: first
            started("done", at(0)),
            started("failed", at(0)),
            started("too-new", at(60)),  # started after the cutoff
            observed("seen-late", "running", at(50)),
            observed("seen-early", "running", at(20)),
            observed("seen-early-b", "running", at(20)),
            completed("done", at(30)),
            failed("failed", at(31)),
        ]
        await store.writer.apply(positioned(events), {}, CONSUMER)
        cutoff = at(30)
        stale = await store.audits.stale_running(cutoff, 100)
        assert [r.audit_id for r in stale] == [
            "never-old",
            "never-young",
            "seen-early-b",
            "seen-early",
            "seen-late",
        ]
        assert all(r.status == "running" for r in stale)
        assert [r.audit_id for r in await store.audits.stale_running(cutoff, 2)] == [
            "never-old",
            "never-young",
        ]
        # strictly before: an audit started exactly at the cutoff is not stale yet
        assert [r.audit_id for r in await store.audits.stale_running(at(4), 100)] == [
            "never-old",
            "seen-late",
        ]
        assert await store.audits.stale_running(at(0), 100) == []

    async def test_holding_finds_the_audit_of_each_current_instance(
        self, store: ProjectionStore
    ) -> None:
        events: list[AuditEvent] = [
            started("a-one", at(0), instance="wf-one"),
            started("a-moved", at(1), instance="wf-old"),
            attached("a-moved", "wf-new", at(2)),
            started("a-none", at(3), instance=None),
            started("a-first", at(4), instance="wf-shared"),
            started("a-second", at(5), instance="wf-shared"),
            failed("a-one", at(6)),
        ]
        await store.writer.apply(positioned(events), {}, CONSUMER)
        asked = ["wf-one", "wf-old", "wf-new", "wf-shared", "wf-nobody", "wf-one"]
        found = await store.audits.holding(asked)
        assert {i: r.audit_id for i, r in found.items()} == {
            "wf-one": "a-one",  # whatever its status: the caller judges it
            "wf-new": "a-moved",  # the current instance, never the one it left
            "wf-shared": "a-second",  # of two, the one started last
        }
        assert found["wf-one"].status == "failed"
        assert await store.audits.holding([]) == {}
        many = [f"wf-{i}" for i in range(1200)] + ["wf-new"]  # more than one query's worth
        assert list(await store.audits.holding(many)) == ["wf-new"]

    async def test_count_by_status(self, store: ProjectionStore) -> None:
        assert await store.audits.count_by_status() == {}
        events: list[AuditEvent] = [
            started("a-1"),
            started("a-2"),
            started("a-3"),
            started("a-4"),
            completed("a-2", at(1)),
            failed("a-3", at(1)),
            failed("a-4", at(1), by="reconciler", code="instance_lost"),
        ]
        await store.writer.apply(positioned(events), {}, CONSUMER)
        assert await store.audits.count_by_status() == {"running": 1, "completed": 1, "failed": 2}

    async def test_failure_counts_by_code_and_finder_since_a_time(
        self, store: ProjectionStore
    ) -> None:
        assert await store.audits.failure_counts(at(0)) == {}
        events: list[AuditEvent] = [
            *(started(f"a-{i}") for i in range(6)),
            failed("a-0", at(1), code="oom"),  # before the window
            failed("a-1", at(5), code="oom"),
            failed("a-2", at(6), by="reconciler", code="instance_lost", reconciled_by="watchdog"),
            failed("a-3", at(7), by="reconciler", code="instance_lost", reconciled_by="watchdog"),
            failed("a-4", at(8), by="reconciler", code="oom", reconciled_by="on_demand"),
            completed("a-5", at(9)),
        ]
        await store.writer.apply(positioned(events), {}, CONSUMER)
        assert await store.audits.failure_counts(at(5)) == {
            ("oom", None): 1,
            ("instance_lost", "watchdog"): 2,
            ("oom", "on_demand"): 1,
        }
        assert await store.audits.failure_counts(at(8)) == {("oom", "on_demand"): 1}
        assert await store.audits.failure_counts(at(10)) == {}

    async def test_list_audits_shadow_keeps_running_audits_shadow_mode_would_fail(
        self, store: ProjectionStore
    ) -> None:
        events: list[AuditEvent] = [
            started("a-would", at(1)),
            started("a-healthy", at(2)),
            started("a-would-2", at(3)),
            started("a-failed-since", at(4)),
            simulated("a-would", at(20)),
            simulated("a-would-2", at(21)),
            simulated("a-failed-since", at(22)),
            failed("a-failed-since", at(23)),
        ]
        await store.writer.apply(positioned(events), {}, CONSUMER)
        rows = await store.audits.list_audits(shadow=True)
        assert [r.audit_id for r in rows] == ["a-would-2", "a-would"]
        page = await store.audits.list_audits(shadow=True, after=(at(3), "a-would-2"))
        assert [r.audit_id for r in page] == ["a-would"]
        assert len(await store.audits.list_audits()) == 4

    async def test_running_summary_counts_the_stale_and_dates_the_oldest(
        self, store: ProjectionStore
    ) -> None:
        assert await store.audits.running_summary(at(60)) == (0, None)
        events = [started("a-old", at(0)), started("a-mid", at(20)), started("a-new", at(50))]
        events += [started("a-done", at(-30)), completed("a-done", at(10))]
        batch = positioned(events)
        await store.writer.apply(batch, next_offsets(batch), CONSUMER)
        assert await store.audits.running_summary(at(30)) == (2, at(0))
        assert await store.audits.running_summary(at(0)) == (0, at(0))

    async def test_iter_rows_yields_every_row_in_audit_id_order(
        self, store: ProjectionStore
    ) -> None:
        ids = [f"a-{i:05d}" for i in range(2345)]
        shuffled = ids[1::2] + ids[::2] + ["A-upper", "a.dot", "a:colon", "Z_9"]
        batch = positioned([started(a, at(i % 7)) for i, a in enumerate(shuffled)])
        for i in range(0, len(batch), 1000):
            await store.writer.apply(batch[i : i + 1000], {}, CONSUMER)
        seen = [r.audit_id async for r in store.audits.iter_rows()]
        assert seen == sorted(shuffled)  # code point order, as the ids are ASCII
        assert len(seen) == len(set(seen)) == len(shuffled)

    async def test_histories_of_many_audits_are_each_audits_history(
        self, store: ProjectionStore
    ) -> None:
        # given a mix of audits, and more audits than one read of the adapters takes
        batch = positioned(lifecycle_mix())
        many = positioned([started(f"m-{i:04d}") for i in range(1200)], partition=1)
        await store.writer.apply(batch[:7], {}, CONSUMER)
        await store.writer.apply(batch[7:] + many, {}, CONSUMER)
        mixed = sorted({e.audit_id for e, _ in batch})

        # when their histories are read at once (an unknown audit among them)
        asked = [*reversed(mixed), "a-unknown", *(e.audit_id for e, _ in many)]
        found = await store.audits.histories(asked)

        # then each is the audit's own history, in log order, with positions
        assert list(found) == asked
        for audit_id in mixed:
            assert found[audit_id] == await store.audits.history(audit_id)
            assert found[audit_id]  # every audit of the mix has events
        assert found["a-unknown"] == []
        assert [[h.event for h in found[e.audit_id]] for e, _ in many] == [[e] for e, _ in many]
        assert [found[e.audit_id][0].position for e, p in many] == [p for _, p in many]
        assert await store.audits.histories([]) == {}

    async def test_recorded_gives_the_events_recorded_under_the_same_keys(
        self, store: ProjectionStore
    ) -> None:
        # given an audit's start and step recorded
        start, step = started("a-1", at(0)), progressed("a-1", at(1), pages_crawled=2)
        await store.writer.apply(positioned([start, step]), {}, CONSUMER)

        # when asked about a repeat of the step, the start's id under another audit, a new id
        repeat = step.model_copy(update={"occurred_at": at(5), "producer": "retry"})
        elsewhere = started("a-2", at(0)).model_copy(update={"event_id": start.event_id})
        found = await store.audits.recorded([repeat, elsewhere, started("a-3", at(0))])

        # then only the step's key is recorded, as the step first was
        assert found == {("a-1", step.event_id.int): step}
        assert await store.audits.recorded([]) == {}

    async def test_failures_by_hour_counts_each_utc_hour_by_error_code_since_a_time(
        self, store: ProjectionStore
    ) -> None:
        # given failures in three hours (one at an hour's first microsecond, one in another
        # zone), a failure overturned, a completion, and a failure before the window
        assert await store.audits.failures_by_hour(at(0)) == {}
        ist = timezone(timedelta(hours=5, minutes=30))
        events: list[AuditEvent] = [
            *(started(f"a-{i}") for i in range(8)),
            failed("a-0", at(-1), code="oom"),  # before the window
            failed("a-1", at(0), code="oom"),  # 08:00:00.000000 exactly
            failed("a-2", at(59, 59.999999), code="oom"),
            failed("a-3", at(30), by="reconciler", code="instance_lost", reconciled_by="watchdog"),
            failed("a-4", at(60).astimezone(ist), code="db_error"),  # 09:00 UTC
            failed("a-5", at(185), code="oom"),  # 11:05
            completed("a-6", at(20)),
            failed("a-7", at(40), by="reconciler", code="instance_lost", reconciled_by="watchdog"),
            completed("a-7", at(45)),  # overturned: no longer failed
        ]
        await store.writer.apply(positioned(events), {}, CONSUMER)

        # when counted since 08:00, then by hour start (aware, UTC) and code
        found = await store.audits.failures_by_hour(at(0))
        hour = T0.replace(minute=0)
        assert found == {
            (hour, "oom"): 2,
            (hour, "instance_lost"): 1,
            (hour + timedelta(hours=1), "db_error"): 1,
            (hour + timedelta(hours=3), "oom"): 1,
        }
        for start, _ in found:
            assert_utc(start)
        # and since a time inside an hour, only the failures at or after it are in its count
        assert await store.audits.failures_by_hour(at(30)) == {
            (hour, "oom"): 1,
            (hour, "instance_lost"): 1,
            (hour + timedelta(hours=1), "db_error"): 1,
            (hour + timedelta(hours=3), "oom"): 1,
        }
        assert await store.audits.failures_by_hour(at(186)) == {}
