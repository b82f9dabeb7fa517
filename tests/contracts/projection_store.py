"""The projection store contract: every adapter of ``projections.store.ProjectionStore`` passes
this suite unchanged.

Abstract (the module name does not start with ``test_``, so pytest does not collect it). A
backend subclasses :class:`ProjectionStoreContract` in a ``test_*.py`` module and provides:

- the ``make_store`` fixture: a factory of *unstarted* stores that all share one fresh,
  isolated database (a file, a schema) for the test;
- :meth:`ProjectionStoreContract.poison_offsets`: make the next write of offsets for
  consumer ``"poison"`` fail inside the database (a trigger), for the atomicity test.

Events are built from ``statemachine.events`` models; the expected rows are the pure fold
``projections.row.project`` over the same events.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from projections.row import AuditRow, project
from projections.store import ProjectionStore
from projections.values import ApplyResult, Position
from statemachine.errors import StoreError
from statemachine.events import (
    EVENT_ADAPTER,
    AuditCompleted,
    AuditEvent,
    AuditFailed,
    AuditFailureHeld,
    AuditFailureReleased,
    AuditFailureSimulated,
    AuditProgressed,
    AuditStarted,
    WorkflowInstanceAttached,
    WorkflowProbeFailed,
    WorkflowStatusObserved,
)

__all__ = ["ProjectionStoreContract"]

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
TOPIC = "audit.lifecycle.v1"
CONSUMER = "projector"

MakeStore = Callable[[], ProjectionStore]


# -- event builders -----------------------------------------------------------------------


def at(minutes: float = 0, seconds: float = 0) -> datetime:
    return T0 + timedelta(minutes=minutes, seconds=seconds)


def _env(audit_id: str, when: datetime, **extra: Any) -> dict[str, Any]:
    return {
        "event_id": extra.pop("event_id", None) or uuid.uuid4(),
        "audit_id": audit_id,
        "occurred_at": when,
        "producer": "contract",
        **extra,
    }


def started(
    audit_id: str, when: datetime = T0, instance: str | None = "wf-1", **data: Any
) -> AuditStarted:
    payload = {"project_id": "p-1", "workflow_instance_id": instance, **data}
    return AuditStarted(**_env(audit_id, when), data=payload)


def attached(audit_id: str, instance: str, when: datetime = T0) -> WorkflowInstanceAttached:
    return WorkflowInstanceAttached(**_env(audit_id, when), data={"workflow_instance_id": instance})


def progressed(audit_id: str, when: datetime = T0, **data: Any) -> AuditProgressed:
    return AuditProgressed(**_env(audit_id, when), data=data)


def completed(audit_id: str, when: datetime = T0, **data: Any) -> AuditCompleted:
    return AuditCompleted(**_env(audit_id, when), data=data)


def failed(
    audit_id: str, when: datetime = T0, by: str = "workflow", code: str = "oom", **extra: Any
) -> AuditFailed:
    data = {"error_code": code, "error_detail": f"{code} detail", "failed_by": by, **extra}
    return AuditFailed(**_env(audit_id, when), data=data)


def simulated(audit_id: str, when: datetime = T0) -> AuditFailureSimulated:
    data = {
        "error_code": "instance_lost",
        "error_detail": "Workflow instance was not found",
        "failed_by": "reconciler",
        "reconciled_by": "watchdog",
    }
    return AuditFailureSimulated(**_env(audit_id, when), data=data)


def observed(
    audit_id: str,
    status: str,
    when: datetime = T0,
    instance: str | None = "wf-1",
    causation_id: uuid.UUID | None = None,
    **data: Any,
) -> WorkflowStatusObserved:
    payload = {
        "workflow_instance_id": instance,
        "status": status,
        "trigger": "watchdog",
        "observed_at": when,
        **data,
    }
    return WorkflowStatusObserved(**_env(audit_id, when, causation_id=causation_id), data=payload)


def probe_failed(
    audit_id: str, when: datetime = T0, causation_id: uuid.UUID | None = None
) -> WorkflowProbeFailed:
    data = {
        "workflow_instance_id": "wf-1",
        "reason": "timeout",
        "detail": "probe gave up",
        "trigger": "watchdog",
        "observed_at": when,
    }
    return WorkflowProbeFailed(**_env(audit_id, when, causation_id=causation_id), data=data)


def held(audit_id: str, when: datetime = T0) -> AuditFailureHeld:
    decision = {
        "error_code": "instance_lost",
        "error_detail": "Workflow instance was not found",
        "failed_by": "reconciler",
        "rule": "instance_lost",
    }
    data = {"decision": decision, "reason": "the mass-failure brake is engaged"}
    return AuditFailureHeld(**_env(audit_id, when), data=data)


def released(hold: AuditFailureHeld, when: datetime = T0) -> AuditFailureReleased:
    data = {"held_id": hold.event_id, "actor": "cli:ops"}
    return AuditFailureReleased(**_env(hold.audit_id, when), data=data)


_offsets = itertools.count()


def positioned(
    events: Sequence[AuditEvent], partition: int = 0
) -> list[tuple[AuditEvent, Position]]:
    return [(e, (TOPIC, partition, next(_offsets))) for e in events]


def next_offsets(batch: Sequence[tuple[AuditEvent, Position]]) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for _, (topic, partition, offset) in batch:
        out[(topic, partition)] = max(out.get((topic, partition), 0), offset + 1)
    return out


def pure_fold(events: Sequence[AuditEvent]) -> dict[str, AuditRow]:
    rows: dict[str, AuditRow] = {}
    for event in events:
        rows[event.audit_id] = project(rows.get(event.audit_id), event)
    return {k: r for k, r in rows.items() if r.state.exists}


def same_row(stored: AuditRow | None, expected: AuditRow) -> bool:
    """Equal but for ``updated_at``, which the store sets."""
    return (
        stored is not None
        and stored.state == expected.state
        and stored.version == expected.version
        and stored.last_event_id == expected.last_event_id
    )


def assert_utc(value: datetime | None) -> None:
    assert value is not None
    assert value.tzinfo is not None and value.utcoffset() == timedelta(0)


def lifecycle_mix() -> list[AuditEvent]:
    """Several audits through every kind of transition, in log order."""
    return [
        started("a-run", at(0), pages_total=10, start_url="https://example.com/"),
        started("a-done", at(1), organization_id="org-1", started_by_user_id="u-1"),
        started("a-fail", at(2), instance=None),
        started("a-over", at(3)),
        attached("a-fail", "wf-9", at(4)),
        progressed("a-run", at(5), current_phase="crawl", pages_crawled=3),
        observed("a-run", "running", at(6)),
        probe_failed("a-run", at(7)),
        observed("a-run", "running", at(8), instance="wf-other"),  # stale: ignored
        progressed("a-done", at(9), pages_crawled=7, pages_total=7),
        completed("a-done", at(10), pages_crawled=7),
        progressed("a-done", at(11), current_phase="late", pages_crawled=99),  # after terminal
        failed("a-fail", at(12), by="workflow", code="oom", failed_phase="crawl"),
        started("a-fail", at(13), project_id="p-2"),  # second start: recorded, not applied
        failed(
            "a-over",
            at(14),
            by="reconciler",
            code="finalize_lost",
            reconciled_by="watchdog",
            policy={
                "finalize_grace_s": 600.0,
                "mode": "enforce",
                "count": 3,
                "shadow": False,
                "x": None,
            },
        ),
        simulated("a-run", at(15)),
        completed("a-over", at(16)),  # overturns the reconciler's failure
        observed("a-over", "complete", at(17)),  # observation of a terminal audit
    ]


class ProjectionStoreContract:
    # -- what a backend provides -------------------------------------------------------------

    @pytest.fixture
    def make_store(self) -> MakeStore:
        raise NotImplementedError

    async def poison_offsets(self, store: ProjectionStore) -> None:
        """Make writing offsets for consumer ``"poison"`` fail in the database."""
        raise NotImplementedError

    # -- fixtures ----------------------------------------------------------------------------

    @pytest.fixture
    async def store(self, make_store: MakeStore) -> AsyncIterator[ProjectionStore]:
        s = make_store()
        await s.start()
        await s.init()
        try:
            yield s
        finally:
            await s.stop()

    @staticmethod
    async def rows_of(store: ProjectionStore) -> dict[str, AuditRow]:
        return {r.audit_id: r async for r in store.iter_rows()}

    # -- lifecycle ---------------------------------------------------------------------------

    async def test_init_is_idempotent_and_returns_the_schema_version(
        self, make_store: MakeStore
    ) -> None:
        async with make_store() as store:
            first = await store.init()
            assert first >= 1
            assert await store.init() == first
            await store.apply(positioned([started("a-1")]), {}, CONSUMER)
        async with make_store() as again:
            assert await again.init() == first
            assert (await again.get("a-1")) is not None  # init keeps data

    async def test_start_and_stop_are_idempotent_and_a_stopped_store_starts_again(
        self, make_store: MakeStore
    ) -> None:
        store = make_store()
        await store.start()
        await store.start()
        await store.init()
        await store.apply(positioned([started("a-1")]), {}, CONSUMER)
        await store.stop()
        await store.stop()
        with pytest.raises(StoreError):
            await store.get("a-1")
        async with store:
            await store.ping()
            row = await store.get("a-1")
            assert row is not None and row.version == 1

    async def test_a_stopped_store_raises_a_non_retriable_store_error(
        self, make_store: MakeStore
    ) -> None:
        store = make_store()
        with pytest.raises(StoreError) as info:
            await store.get("a-1")
        assert info.value.retriable is False

    # -- apply -------------------------------------------------------------------------------

    async def test_apply_folds_rows_exactly_like_project(self, store: ProjectionStore) -> None:
        events = lifecycle_mix()
        result = await store.apply(positioned(events), {}, CONSUMER)
        assert result == ApplyResult(applied=len(events), skipped=0)
        expected = pure_fold(events)
        stored = await self.rows_of(store)
        assert set(stored) == set(expected)
        for audit_id, row in expected.items():
            assert same_row(stored[audit_id], row), (stored[audit_id], row)
            assert same_row(await store.get(audit_id), row)
            assert_utc(stored[audit_id].updated_at)
        # spot checks that the fold did what the table says
        assert stored["a-run"].status == "running" and stored["a-run"].version == 6
        assert stored["a-done"].state.current_phase == "discovery"
        assert stored["a-done"].state.pages_crawled == 7
        assert stored["a-fail"].state.project_id == "p-1"
        assert stored["a-over"].state.overturned is True
        assert stored["a-over"].state.error_code is None

    async def test_apply_in_many_batches_equals_one_fold(self, store: ProjectionStore) -> None:
        events = lifecycle_mix()
        batch = positioned(events)
        for i in range(0, len(batch), 4):
            await store.apply(batch[i : i + 4], next_offsets(batch[i : i + 4]), CONSUMER)
        expected = pure_fold(events)
        stored = await self.rows_of(store)
        assert set(stored) == set(expected)
        for audit_id, row in expected.items():
            assert same_row(stored[audit_id], row), (stored[audit_id], row)

    async def test_version_does_not_depend_on_batch_boundaries(
        self, store: ProjectionStore
    ) -> None:
        early = progressed("a-early", at(0), pages_crawled=1)
        start = started("a-early", at(1))
        await store.apply(positioned([early]), {}, CONSUMER)
        await store.apply(positioned([start]), {}, CONSUMER)
        assert same_row(await store.get("a-early"), pure_fold([early, start])["a-early"])

    async def test_events_for_an_unknown_audit_are_recorded_without_a_row(
        self, store: ProjectionStore
    ) -> None:
        orphan = progressed("a-ghost", at(0), pages_crawled=1)
        assert await store.apply(positioned([orphan]), {}, CONSUMER) == ApplyResult(1, 0)
        assert await store.get("a-ghost") is None
        assert [h.event for h in await store.history("a-ghost")] == [orphan]

    async def test_a_redelivered_batch_is_skipped_and_changes_nothing(
        self, store: ProjectionStore
    ) -> None:
        batch = positioned(lifecycle_mix())
        await store.apply(batch, next_offsets(batch), CONSUMER)
        rows = await self.rows_of(store)
        history = await store.history("a-run")

        again = await store.apply(batch, next_offsets(batch), CONSUMER)

        assert again == ApplyResult(applied=0, skipped=len(batch))
        assert await self.rows_of(store) == rows  # updated_at included: nothing was written
        assert await store.history("a-run") == history
        assert await store.stored_offsets(CONSUMER) == next_offsets(batch)

    async def test_a_partly_redelivered_batch_applies_only_the_new_events(
        self, store: ProjectionStore
    ) -> None:
        first = positioned([started("a-1", at(0)), progressed("a-1", at(1), pages_crawled=1)])
        await store.apply(first, {}, CONSUMER)
        new = positioned([progressed("a-1", at(2), pages_crawled=2)])
        result = await store.apply([*first, *new], {}, CONSUMER)
        assert result == ApplyResult(applied=1, skipped=2)
        row = await store.get("a-1")
        assert row is not None and row.version == 3 and row.state.pages_crawled == 2
        assert len(await store.history("a-1")) == 3

    async def test_a_duplicate_inside_one_batch_is_applied_once(
        self, store: ProjectionStore
    ) -> None:
        start = started("a-1")
        step = progressed("a-1", at(1), pages_crawled=5)
        batch = positioned([start, step, step])
        assert await store.apply(batch, {}, CONSUMER) == ApplyResult(applied=2, skipped=1)
        assert same_row(await store.get("a-1"), pure_fold([start, step])["a-1"])
        assert len(await store.history("a-1")) == 2

    async def test_apply_is_atomic(self, store: ProjectionStore) -> None:
        await self.poison_offsets(store)
        batch = positioned([started("a-1"), progressed("a-1", at(1), pages_crawled=1)])
        with pytest.raises(StoreError) as info:
            await store.apply(batch, next_offsets(batch), "poison")
        assert info.value.retriable is False
        assert await store.get("a-1") is None
        assert await store.history("a-1") == []
        assert await store.stored_offsets("poison") == {}
        # nothing was half-applied: the same batch applies in full elsewhere
        assert await store.apply(batch, next_offsets(batch), CONSUMER) == ApplyResult(2, 0)
        assert (await store.get("a-1")) is not None

    async def test_an_empty_batch_still_stores_offsets(self, store: ProjectionStore) -> None:
        assert await store.apply([], {(TOPIC, 3): 42}, CONSUMER) == ApplyResult(0, 0)
        assert await store.stored_offsets(CONSUMER) == {(TOPIC, 3): 42}

    async def test_stored_offsets_round_trip_per_consumer(self, store: ProjectionStore) -> None:
        assert await store.stored_offsets(CONSUMER) == {}
        await store.apply([], {(TOPIC, 0): 10, (TOPIC, 1): 5, ("other", 0): 2**40}, CONSUMER)
        await store.apply([], {(TOPIC, 0): 7}, "rebuilder")
        await store.apply([], {(TOPIC, 1): 6}, CONSUMER)
        assert await store.stored_offsets(CONSUMER) == {
            (TOPIC, 0): 10,
            (TOPIC, 1): 6,
            ("other", 0): 2**40,
        }
        assert await store.stored_offsets("rebuilder") == {(TOPIC, 0): 7}

    async def test_reset_empties_rows_history_and_only_that_consumers_offsets(
        self, store: ProjectionStore
    ) -> None:
        batch = positioned([started("a-1"), started("a-2", at(1))])
        await store.apply(batch, next_offsets(batch), CONSUMER)
        await store.apply([], {(TOPIC, 0): 1}, "other")
        await store.reset(CONSUMER)
        assert await self.rows_of(store) == {}
        assert await store.history("a-1") == []
        assert await store.count_by_status() == {}
        assert await store.stored_offsets(CONSUMER) == {}
        assert await store.stored_offsets("other") == {(TOPIC, 0): 1}
        # a rebuild re-applies the same events: they are not skipped
        assert await store.apply(batch, next_offsets(batch), CONSUMER) == ApplyResult(2, 0)

    async def test_running_summary_counts_the_stale_and_dates_the_oldest(
        self, store: ProjectionStore
    ) -> None:
        assert await store.running_summary(at(60)) == (0, None)
        events = [started("a-old", at(0)), started("a-mid", at(20)), started("a-new", at(50))]
        events += [started("a-done", at(-30)), completed("a-done", at(10))]
        batch = positioned(events)
        await store.apply(batch, next_offsets(batch), CONSUMER)
        assert await store.running_summary(at(30)) == (2, at(0))
        assert await store.running_summary(at(0)) == (0, at(0))

    async def test_history_set_aside_survives_a_reset_until_dropped(
        self, store: ProjectionStore
    ) -> None:
        # given five events on two partitions
        events = [started("a-1"), progressed("a-1", at(1)), started("a-2", at(2))]
        batch = [(e, (TOPIC, 0, i)) for i, e in enumerate(events)]
        batch += [(started("b-1", at(3)), (TOPIC, 1, 0)), (started("b-2", at(4)), (TOPIC, 1, 1))]
        await store.apply(batch, {(TOPIC, 0): 3, (TOPIC, 1): 2}, CONSUMER)

        # when what lies before offset 2 of partition 0 and offset 1 of partition 1 is set aside
        assert await store.keep_history({(TOPIC, 0): 2, (TOPIC, 1): 1}) == 3
        await store.reset(CONSUMER)

        # then it is there in the order it was projected, with its positions, after the reset
        kept = await store.kept_history(0, 100)
        assert [pos for _, _, pos in kept] == [(TOPIC, 0, 0), (TOPIC, 0, 1), (TOPIC, 1, 0)]
        assert [EVENT_ADAPTER.validate_json(body).event_id for _, body, _ in kept] == [
            batch[0][0].event_id, batch[1][0].event_id, batch[3][0].event_id,
        ]  # fmt: skip
        assert await store.kept_history(kept[0][0], 1) == kept[1:2]
        # and setting aside again (an interrupted rebuild) adds nothing twice
        assert await store.keep_history({(TOPIC, 0): 2, (TOPIC, 1): 1}) == 3
        await store.drop_kept_history()
        assert await store.keep_history({(TOPIC, 0): 2}) == 0
        await store.drop_kept_history()

    # -- reads -------------------------------------------------------------------------------

    async def test_get_an_unknown_audit_is_none(self, store: ProjectionStore) -> None:
        assert await store.get("a-nope") is None

    async def test_timestamps_round_trip_exactly_as_utc(self, store: ProjectionStore) -> None:
        ist = timezone(timedelta(hours=5, minutes=30))
        start_at = datetime(2026, 11, 30, 13, 30, 1, 123456, tzinfo=ist)
        seen_at = datetime(2026, 11, 30, 8, 45, 59, 999999, tzinfo=UTC)
        done_at = datetime(2031, 1, 2, 3, 4, 5, 1, tzinfo=timezone(timedelta(hours=-7)))
        start = started("a-ts", start_at, started_at=start_at)
        look = observed("a-ts", "running", seen_at)
        done = completed("a-ts", seen_at, completed_at=done_at)
        await store.apply(positioned([start, look, done]), {}, CONSUMER)
        row = await store.get("a-ts")
        assert row is not None
        for stored, original in (
            (row.state.started_at, start_at),
            (row.state.last_observed_at, seen_at),
            (row.state.completed_at, done_at),
        ):
            assert_utc(stored)
            assert stored == original
            assert stored is not None and stored.microsecond == original.astimezone(UTC).microsecond
        history = await store.history("a-ts")
        assert [h.event for h in history] == [start, look, done]
        assert history[0].event.occurred_at == start_at

    async def test_verbatim_bodies_are_stored_as_the_same_events(
        self, store: ProjectionStore
    ) -> None:
        ist = timezone(timedelta(hours=5, minutes=30))
        events = [
            started("a-raw", datetime(2026, 11, 30, 13, 30, 1, 5, tzinfo=ist)),
            progressed("a-raw", at(1), pages_crawled=7, current_phase="crawl"),
            observed("a-raw", "errored", at(30)),
            completed("a-raw", at(40)),
        ]
        bodies: list[bytes | None] = [  # as another producer might have written them
            json.dumps(e.model_dump(mode="json"), indent=2, ensure_ascii=True).encode()
            if i % 2 == 0
            else None
            for i, e in enumerate(events)
        ]
        local_time = {"occurred_at": "2026-11-30T13:30:01.000005+05:30"}  # the same instant
        bodies[0] = json.dumps({**events[0].model_dump(mode="json"), **local_time}).encode()
        result = await store.apply(positioned(events), {}, CONSUMER, bodies)
        assert result == ApplyResult(applied=4, skipped=0)
        history = await store.history("a-raw")
        assert [h.event for h in history] == events
        assert_utc(history[0].event.occurred_at)
        assert same_row(await store.get("a-raw"), pure_fold(events)["a-raw"])

    async def test_history_is_in_log_order_with_positions(self, store: ProjectionStore) -> None:
        events = lifecycle_mix()
        batch = positioned(events)
        await store.apply(batch[:7], {}, CONSUMER)
        await store.apply(batch[7:], {}, CONSUMER)
        for audit_id in ("a-run", "a-done", "a-fail", "a-over"):
            expected = [(e, p) for e, p in batch if e.audit_id == audit_id]
            history = await store.history(audit_id)
            assert [(h.event, h.position) for h in history] == expected
            for entry in history:
                assert_utc(entry.recorded_at)
        assert await store.history("a-unknown") == []

    async def test_caused_by_finds_the_recorded_consequences(self, store: ProjectionStore) -> None:
        cause_1, cause_2, cause_3 = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
        look = observed("a-1", "running", at(20), causation_id=cause_1)
        other = observed("a-2", "running", at(21), causation_id=cause_2)
        gave_up = probe_failed("a-1", at(22), causation_id=cause_1)
        unrelated = observed("a-1", "running", at(23), causation_id=cause_3)
        events: list[AuditEvent] = [started("a-1"), started("a-2"), look, other, gave_up, unrelated]
        await store.apply(positioned(events), {}, CONSUMER)
        assert await store.caused_by([str(cause_1), str(cause_2)]) == [look, other, gave_up]
        assert await store.caused_by([str(uuid.uuid4())]) == []
        assert await store.caused_by([]) == []

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
        await store.apply(positioned(events), {}, CONSUMER)
        ids = [r.audit_id for r in await store.list_audits()]
        assert ids == ["a-5", "a-4", "a-3", "a-2", "a-1"]
        running = await store.list_audits(status="running")
        assert [r.audit_id for r in running] == ["a-4", "a-3", "a-1"]
        assert all(r.status == "running" for r in running)
        assert [r.audit_id for r in await store.list_audits(status="failed")] == ["a-5"]
        assert await store.list_audits(status="nope") == []
        assert [r.audit_id for r in await store.list_audits(limit=2)] == ["a-5", "a-4"]

    async def test_list_audits_keyset_pages_neither_overlap_nor_skip(
        self, store: ProjectionStore
    ) -> None:
        # 23 audits, many sharing a start time; some completed
        events: list[AuditEvent] = [started(f"a-{i:02d}", at(i // 3)) for i in range(23)]
        events += [completed(f"a-{i:02d}", at(30)) for i in range(0, 23, 4)]
        await store.apply(positioned(events), {}, CONSUMER)
        for status in (None, "running"):
            everything = await store.list_audits(status=status, limit=1000)
            pages: list[list[AuditRow]] = []
            after: tuple[datetime, str] | None = None
            while True:
                page = await store.list_audits(status=status, limit=4, after=after)
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
        assert len(await store.list_audits(limit=1000)) == 23
        assert len(await store.list_audits(status="running", limit=1000)) == 17

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
        await store.apply(positioned(events), {}, CONSUMER)
        cutoff = at(30)
        stale = await store.stale_running(cutoff, 100)
        assert [r.audit_id for r in stale] == [
            "never-old",
            "never-young",
            "seen-early-b",
            "seen-early",
            "seen-late",
        ]
        assert all(r.status == "running" for r in stale)
        assert [r.audit_id for r in await store.stale_running(cutoff, 2)] == [
            "never-old",
            "never-young",
        ]
        # strictly before: an audit started exactly at the cutoff is not stale yet
        assert [r.audit_id for r in await store.stale_running(at(4), 100)] == [
            "never-old",
            "seen-late",
        ]
        assert await store.stale_running(at(0), 100) == []

    async def test_count_by_status(self, store: ProjectionStore) -> None:
        assert await store.count_by_status() == {}
        events: list[AuditEvent] = [
            started("a-1"),
            started("a-2"),
            started("a-3"),
            started("a-4"),
            completed("a-2", at(1)),
            failed("a-3", at(1)),
            failed("a-4", at(1), by="reconciler", code="instance_lost"),
        ]
        await store.apply(positioned(events), {}, CONSUMER)
        assert await store.count_by_status() == {"running": 1, "completed": 1, "failed": 2}

    async def test_failure_counts_by_code_and_finder_since_a_time(
        self, store: ProjectionStore
    ) -> None:
        assert await store.failure_counts(at(0)) == {}
        events: list[AuditEvent] = [
            *(started(f"a-{i}") for i in range(6)),
            failed("a-0", at(1), code="oom"),  # before the window
            failed("a-1", at(5), code="oom"),
            failed("a-2", at(6), by="reconciler", code="instance_lost", reconciled_by="watchdog"),
            failed("a-3", at(7), by="reconciler", code="instance_lost", reconciled_by="watchdog"),
            failed("a-4", at(8), by="reconciler", code="oom", reconciled_by="on_demand"),
            completed("a-5", at(9)),
        ]
        await store.apply(positioned(events), {}, CONSUMER)
        assert await store.failure_counts(at(5)) == {
            ("oom", None): 1,
            ("instance_lost", "watchdog"): 2,
            ("oom", "on_demand"): 1,
        }
        assert await store.failure_counts(at(8)) == {("oom", "on_demand"): 1}
        assert await store.failure_counts(at(10)) == {}

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
        await store.apply(positioned(events), {}, CONSUMER)
        rows = await store.list_audits(shadow=True)
        assert [r.audit_id for r in rows] == ["a-would-2", "a-would"]
        page = await store.list_audits(shadow=True, after=(at(3), "a-would-2"))
        assert [r.audit_id for r in page] == ["a-would"]
        assert len(await store.list_audits()) == 4

    async def test_iter_rows_yields_every_row_in_audit_id_order(
        self, store: ProjectionStore
    ) -> None:
        ids = [f"a-{i:05d}" for i in range(2345)]
        shuffled = ids[1::2] + ids[::2] + ["A-upper", "a.dot", "a:colon", "Z_9"]
        batch = positioned([started(a, at(i % 7)) for i, a in enumerate(shuffled)])
        for i in range(0, len(batch), 1000):
            await store.apply(batch[i : i + 1000], {}, CONSUMER)
        seen = [r.audit_id async for r in store.iter_rows()]
        assert seen == sorted(shuffled)  # code point order, as the ids are ASCII
        assert len(seen) == len(set(seen)) == len(shuffled)

    # -- coordination ------------------------------------------------------------------------

    async def test_watchdog_lock_is_exclusive_between_stores(
        self, store: ProjectionStore, make_store: MakeStore
    ) -> None:
        async with make_store() as other:
            async with store.watchdog_lock() as held:
                assert held is True
                async with other.watchdog_lock() as also:
                    assert also is False
            async with other.watchdog_lock() as now_free:
                assert now_free is True
                async with store.watchdog_lock() as blocked:
                    assert blocked is False
            async with store.watchdog_lock() as back:
                assert back is True

    async def test_watchdog_lock_is_released_when_the_tick_fails(
        self, store: ProjectionStore, make_store: MakeStore
    ) -> None:
        async with make_store() as other:
            with pytest.raises(RuntimeError, match="tick failed"):
                async with store.watchdog_lock() as held:
                    assert held is True
                    raise RuntimeError("tick failed")
            async with other.watchdog_lock() as free:
                assert free is True

    async def test_watchdog_lock_is_released_when_the_tick_is_cancelled(
        self, store: ProjectionStore, make_store: MakeStore
    ) -> None:
        entered = asyncio.Event()

        async def tick() -> None:
            async with store.watchdog_lock() as held:
                assert held is True
                entered.set()
                await asyncio.Event().wait()  # holds the lock until cancelled

        task = asyncio.create_task(tick())
        await asyncio.wait_for(entered.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        async with make_store() as other, other.watchdog_lock() as free:
            assert free is True

    async def test_a_tick_slot_is_claimed_once_across_stores(
        self, store: ProjectionStore, make_store: MakeStore
    ) -> None:
        async with make_store() as other:
            # given two processes racing for the same interval slot
            first, second = await asyncio.gather(
                store.claim_tick("watchdog", 42, "a"), other.claim_tick("watchdog", 42, "b")
            )

            # then exactly one of them ticks; the next slot, and another job, are free again
            assert sorted([first, second]) == [False, True]
            assert await store.claim_tick("watchdog", 42, "a") is False
            assert await other.claim_tick("watchdog", 43, "b") is True
            assert await store.claim_tick("telemetry-report", 42, "a") is True

    async def test_the_request_budget_is_shared_and_slides(
        self, store: ProjectionStore, make_store: MakeStore
    ) -> None:
        async with make_store() as other:
            # given a budget of 3 requests per 10 s shared by two processes
            grants = [
                await s.take_request_slot("acct", at(seconds=i), 3, 10.0)
                for i, s in enumerate([store, other, store, other])
            ]

            # then the fourth is refused until the first leaves the window
            assert [g.granted for g in grants] == [True, True, True, False]
            assert grants[3].frees_at == at(seconds=10)
            assert await other.requests_in_window("acct", at(seconds=3), 10.0) == 3
            later = await other.take_request_slot("acct", at(seconds=10), 3, 10.0)
            assert later.granted is True
            # and another account has a budget of its own
            assert (await store.take_request_slot("other", at(seconds=3), 3, 10.0)).granted

    async def test_a_pause_holds_every_process_until_it_ends(
        self, store: ProjectionStore, make_store: MakeStore
    ) -> None:
        async with make_store() as other:
            # given a 429 seen by one process
            await store.pause_requests("acct", at(seconds=30))
            await store.pause_requests("acct", at(seconds=20))  # an earlier end does not shorten it

            # then the other process is held until the pause ends, and takes nothing meanwhile
            held = await other.take_request_slot("acct", at(seconds=5), 100, 300.0)
            assert (held.granted, held.paused_until) == (False, at(seconds=30))
            assert await other.requests_paused_until("acct", at(seconds=5)) == at(seconds=30)
            assert await other.requests_in_window("acct", at(seconds=5), 300.0) == 0
            assert await other.requests_paused_until("acct", at(seconds=30)) is None
            assert (await other.take_request_slot("acct", at(seconds=30), 100, 300.0)).granted

    async def test_heartbeats_and_live_components(self, store: ProjectionStore) -> None:
        now = at(100)
        await store.heartbeat("host-a:1", ["projector", "reconciler"], now - timedelta(minutes=5))
        await store.heartbeat("host-b:2", ["projector", "watchdog"], now)
        await store.heartbeat("host-a:1", ["projector"], now)  # refreshes one component
        live = await store.live_components(now - timedelta(minutes=1))
        assert {k: sorted(v) for k, v in live.items()} == {
            "projector": ["host-a:1", "host-b:2"],
            "watchdog": ["host-b:2"],
        }
        everything = await store.live_components(now - timedelta(hours=1))
        assert sorted(everything["reconciler"]) == ["host-a:1"]
        # a heartbeat exactly at `since` counts
        assert sorted((await store.live_components(now))["projector"]) == [
            "host-a:1",
            "host-b:2",
        ]
        await store.forget_process("host-a:1")
        live = await store.live_components(now - timedelta(hours=1))
        assert {k: sorted(v) for k, v in live.items()} == {
            "projector": ["host-b:2"],
            "watchdog": ["host-b:2"],
        }
        await store.forget_process("host-unknown")  # no error

    async def test_telemetry_sent_is_remembered_idempotently(self, store: ProjectionStore) -> None:
        one, two, three = (str(uuid.uuid4()) for _ in range(3))
        assert await store.telemetry_sent([one, two]) == set()
        await store.mark_telemetry_sent(one, at(1))
        await store.mark_telemetry_sent(one, at(2))  # again: no error, still once
        await store.mark_telemetry_sent(three, at(3))
        assert await store.telemetry_sent([one, two, three]) == {one, three}
        assert await store.telemetry_sent([]) == set()
        await store.reset(CONSUMER)  # a rebuild does not forget what was sent
        assert await store.telemetry_sent([one]) == {one}

    # -- the mass-failure brake ----------------------------------------------------------------

    async def test_held_decisions_are_projected_and_listed_oldest_first(
        self, store: ProjectionStore
    ) -> None:
        # given three running audits, two of them with a decision held, one held then released
        hold_b, hold_a, hold_c = held("a-b", at(5)), held("a-a", at(6)), held("a-c", at(7))
        events = [
            *(started(a, at(0)) for a in ("a-a", "a-b", "a-c", "a-d")),
            hold_b,
            hold_a,
            hold_c,
            released(hold_c, at(8)),
        ]
        await store.apply(positioned(events), {}, CONSUMER)

        # then the rows carry the holds as the fold does, and the list is oldest hold first
        rows = await self.rows_of(store)
        assert all(same_row(rows[k], v) for k, v in pure_fold(events).items())
        listed = await store.held_audits()
        assert [(r.audit_id, r.state.held_decision_id) for r in listed] == [
            ("a-b", str(hold_b.event_id)),
            ("a-a", str(hold_a.event_id)),
        ]
        assert listed[0].state.held_at == at(5)
        assert [r.audit_id for r in await store.held_audits(limit=1)] == ["a-b"]

    async def test_a_sweep_is_judged_by_one_claimant_until_its_lease_runs_out(
        self, store: ProjectionStore, make_store: MakeStore
    ) -> None:
        async with make_store() as other:
            # given an open sweep of two requests
            await store.open_sweep("sweep-1", ["r-1", "r-2"], at(0), at(1))
            await store.open_sweep("sweep-1", ["ignored"], at(0), at(1))  # idempotent
            [sweep] = await other.open_sweeps()
            assert (sweep.sweep_id, sweep.requests, sweep.at, sweep.deadline) == (
                "sweep-1",
                ("r-1", "r-2"),
                at(0),
                at(1),
            )

            # when two processes claim its verdict at once, one wins
            claims = await asyncio.gather(
                store.claim_sweep("sweep-1", "a", at(2), 60.0),
                other.claim_sweep("sweep-1", "b", at(2), 60.0),
            )
            assert sorted(claims) == [False, True]
            winner, loser = ("a", "b") if claims[0] else ("b", "a")
            assert await store.claim_sweep("sweep-1", winner, at(2, 30), 60.0) is True  # renews
            assert await store.claim_sweep("sweep-1", loser, at(3, 29), 60.0) is False
            # then a claimant that died is taken over once its lease ran out
            assert await other.claim_sweep("sweep-1", loser, at(3, 31), 60.0) is True

            # and a closed sweep is no longer open, nor claimable
            await store.close_sweep("sweep-1", "released", 3, 90, at(4))
            assert await other.open_sweeps() == []
            assert await store.claim_sweep("sweep-1", "c", at(9), 60.0) is False

    async def test_the_brake_engages_once_and_ends_with_who_ended_it(
        self, store: ProjectionStore, make_store: MakeStore
    ) -> None:
        async with make_store() as other:
            assert (await store.brake()).engaged is False

            # when two sweeps trip the brake at once, one engages it
            first, second = await asyncio.gather(
                store.engage_brake("sweep-1", 30, 40, at(1)),
                other.engage_brake("sweep-2", 25, 30, at(1)),
            )
            assert sorted([first, second]) == [False, True]
            state = await other.brake()
            assert state.engaged is True and state.since == at(1)
            assert (state.sweep_id, state.lost, state.observations) in (
                ("sweep-1", 30, 40),
                ("sweep-2", 25, 30),
            )
            assert await store.engage_brake("sweep-3", 99, 99, at(2)) is False  # stays as it was
            assert (await store.brake()).since == at(1)

            # then ending it says how it was and records who ended it
            before = await other.end_brake("released", "cli:ops", at(3))
            assert before.engaged is True
            after = await store.brake()
            assert (after.engaged, after.ended_by, after.how, after.ended_at) == (
                False,
                "cli:ops",
                "released",
                at(3),
            )
            assert (await store.end_brake("discarded", "x", at(4))).engaged is False
            assert (await store.brake()).how == "released"  # nothing to end: unchanged
            assert await store.engage_brake("sweep-4", 20, 21, at(5)) is True  # engages again

    # -- checkpoints -------------------------------------------------------------------------

    async def test_a_checkpoint_is_kept_per_consumer_and_partition_and_replaced(
        self, store: ProjectionStore, make_store: MakeStore
    ) -> None:
        assert await store.load_checkpoint("g-reconciler", TOPIC, 0) is None
        await store.save_checkpoint("g-reconciler", TOPIC, 0, 10, b"\x00state-10")
        await store.save_checkpoint("g-reconciler", TOPIC, 1, 7, b"other partition")
        await store.save_checkpoint("g-telemetry", TOPIC, 0, 3, b"other consumer")
        await store.save_checkpoint("g-reconciler", TOPIC, 0, 25, b"\x00state-25")
        async with make_store() as other:
            assert await other.load_checkpoint("g-reconciler", TOPIC, 0) == (25, b"\x00state-25")
            assert await other.load_checkpoint("g-reconciler", TOPIC, 1) == (7, b"other partition")
            assert await other.load_checkpoint("g-telemetry", TOPIC, 0) == (3, b"other consumer")
            assert await other.checkpoint_offsets("g-reconciler", TOPIC) == {0: 25, 1: 7}
            assert await other.checkpoint_offsets("g-telemetry", TOPIC) == {0: 3}
            assert await other.checkpoint_offsets("g-telemetry", "other-topic") == {}
