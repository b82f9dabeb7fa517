"""The contract of :class:`~projections.writer.ProjectionWriter`, the projector's write: a batch
folded into rows and history with its offsets in one transaction, redeliveries skipped, offsets
read back, the reset: every adapter passes it unchanged.

Abstract (see :mod:`tests.contracts.projection_store` for what a backend provides).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

import pytest

from projections.store import ProjectionStore
from projections.values import ApplyResult
from statemachine.errors import StoreError
from statemachine.events import AuditEvent
from tests.contracts.projection_store import (
    CONSUMER,
    TOPIC,
    StoreFixtures,
    assert_utc,
    at,
    completed,
    lifecycle_mix,
    next_offsets,
    observed,
    positioned,
    progressed,
    pure_fold,
    same_row,
    started,
)

__all__ = ["ProjectionWriterContract"]


def same_id(event: AuditEvent, as_: AuditEvent) -> AuditEvent:
    """``event`` under the event_id of ``as_``."""
    return event.model_copy(update={"event_id": as_.event_id})


class ProjectionWriterContract(StoreFixtures):
    async def poison_offsets(self, store: ProjectionStore) -> None:
        """Make writing offsets for consumer ``"poison"`` fail in the database (a trigger),
        for the atomicity test."""
        raise NotImplementedError

    async def test_apply_folds_rows_exactly_like_project(self, store: ProjectionStore) -> None:
        events = lifecycle_mix()
        result = await store.writer.apply(positioned(events), {}, CONSUMER)
        assert result == ApplyResult(applied=len(events), skipped=0)
        expected = pure_fold(events)
        stored = await self.rows_of(store)
        assert set(stored) == set(expected)
        for audit_id, row in expected.items():
            assert same_row(stored[audit_id], row), (stored[audit_id], row)
            assert same_row(await store.audits.get(audit_id), row)
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
            await store.writer.apply(batch[i : i + 4], next_offsets(batch[i : i + 4]), CONSUMER)
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
        await store.writer.apply(positioned([early]), {}, CONSUMER)
        await store.writer.apply(positioned([start]), {}, CONSUMER)
        assert same_row(await store.audits.get("a-early"), pure_fold([early, start])["a-early"])

    async def test_events_for_an_unknown_audit_are_recorded_without_a_row(
        self, store: ProjectionStore
    ) -> None:
        orphan = progressed("a-ghost", at(0), pages_crawled=1)
        assert await store.writer.apply(positioned([orphan]), {}, CONSUMER) == ApplyResult(1, 0)
        assert await store.audits.get("a-ghost") is None
        assert [h.event for h in await store.audits.history("a-ghost")] == [orphan]

    async def test_a_redelivered_batch_is_skipped_and_changes_nothing(
        self, store: ProjectionStore
    ) -> None:
        batch = positioned(lifecycle_mix())
        await store.writer.apply(batch, next_offsets(batch), CONSUMER)
        rows = await self.rows_of(store)
        history = await store.audits.history("a-run")

        again = await store.writer.apply(batch, next_offsets(batch), CONSUMER)

        assert again == ApplyResult(applied=0, skipped=len(batch))
        assert await self.rows_of(store) == rows  # updated_at included: nothing was written
        assert await store.audits.history("a-run") == history
        assert await store.writer.stored_offsets(CONSUMER) == next_offsets(batch)

    async def test_a_partly_redelivered_batch_applies_only_the_new_events(
        self, store: ProjectionStore
    ) -> None:
        first = positioned([started("a-1", at(0)), progressed("a-1", at(1), pages_crawled=1)])
        await store.writer.apply(first, {}, CONSUMER)
        new = positioned([progressed("a-1", at(2), pages_crawled=2)])
        result = await store.writer.apply([*first, *new], {}, CONSUMER)
        assert result == ApplyResult(applied=1, skipped=2)
        row = await store.audits.get("a-1")
        assert row is not None and row.version == 3 and row.state.pages_crawled == 2
        assert len(await store.audits.history("a-1")) == 3

    async def test_a_duplicate_inside_one_batch_is_applied_once(
        self, store: ProjectionStore
    ) -> None:
        start = started("a-1")
        step = progressed("a-1", at(1), pages_crawled=5)
        batch = positioned([start, step, step])
        assert await store.writer.apply(batch, {}, CONSUMER) == ApplyResult(applied=2, skipped=1)
        assert same_row(await store.audits.get("a-1"), pure_fold([start, step])["a-1"])
        assert len(await store.audits.history("a-1")) == 2

    async def test_apply_is_atomic(self, store: ProjectionStore) -> None:
        await self.poison_offsets(store)
        batch = positioned([started("a-1"), progressed("a-1", at(1), pages_crawled=1)])
        with pytest.raises(StoreError) as info:
            await store.writer.apply(batch, next_offsets(batch), "poison")
        assert info.value.retriable is False
        assert await store.audits.get("a-1") is None
        assert await store.audits.history("a-1") == []
        assert await store.writer.stored_offsets("poison") == {}
        # nothing was half-applied: the same batch applies in full elsewhere
        assert await store.writer.apply(batch, next_offsets(batch), CONSUMER) == ApplyResult(2, 0)
        assert (await store.audits.get("a-1")) is not None

    async def test_an_empty_batch_still_stores_offsets(self, store: ProjectionStore) -> None:
        assert await store.writer.apply([], {(TOPIC, 3): 42}, CONSUMER) == ApplyResult(0, 0)
        assert await store.writer.stored_offsets(CONSUMER) == {(TOPIC, 3): 42}

    async def test_stored_offsets_round_trip_per_consumer(self, store: ProjectionStore) -> None:
        assert await store.writer.stored_offsets(CONSUMER) == {}
        await store.writer.apply([], {(TOPIC, 0): 10, (TOPIC, 1): 5, ("other", 0): 2**40}, CONSUMER)
        await store.writer.apply([], {(TOPIC, 0): 7}, "rebuilder")
        await store.writer.apply([], {(TOPIC, 1): 6}, CONSUMER)
        assert await store.writer.stored_offsets(CONSUMER) == {
            (TOPIC, 0): 10,
            (TOPIC, 1): 6,
            ("other", 0): 2**40,
        }
        assert await store.writer.stored_offsets("rebuilder") == {(TOPIC, 0): 7}

    async def test_reset_empties_rows_history_and_only_that_consumers_offsets(
        self, store: ProjectionStore
    ) -> None:
        batch = positioned([started("a-1"), started("a-2", at(1))])
        await store.writer.apply(batch, next_offsets(batch), CONSUMER)
        await store.writer.apply([], {(TOPIC, 0): 1}, "other")
        await store.writer.reset(CONSUMER)
        assert await self.rows_of(store) == {}
        assert await store.audits.history("a-1") == []
        assert await store.audits.count_by_status() == {}
        assert await store.writer.stored_offsets(CONSUMER) == {}
        assert await store.writer.stored_offsets("other") == {(TOPIC, 0): 1}
        # a rebuild re-applies the same events: they are not skipped
        assert await store.writer.apply(batch, next_offsets(batch), CONSUMER) == ApplyResult(2, 0)

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
        result = await store.writer.apply(positioned(events), {}, CONSUMER, bodies)
        assert result == ApplyResult(applied=4, skipped=0)
        history = await store.audits.history("a-raw")
        assert [h.event for h in history] == events
        assert_utc(history[0].event.occurred_at)
        assert same_row(await store.audits.get("a-raw"), pure_fold(events)["a-raw"])

    # -- the idempotency key (audit_id, event_id) ------------------------------------------

    async def test_a_repeat_with_a_new_time_and_producer_is_applied_once_in_and_across_batches(
        self, store: ProjectionStore
    ) -> None:
        # given an audit's start and a step, the step repeated in its own batch with another
        # occurred_at, producer and schema version (a retried workflow step rebuilds its event)
        start = started("a-1", at(0))
        step = progressed("a-1", at(1), pages_crawled=3)
        retried = step.model_copy(update={"occurred_at": at(9), "producer": "retry"})
        handed: list[Sequence[tuple[int, str]]] = []

        async def hand(conflicts: Sequence[tuple[int, str]]) -> None:
            handed.append(conflicts)

        # when the batch is applied, and the step comes once more in a later batch
        first = await store.writer.apply(
            positioned([start, step, retried]), {}, CONSUMER, None, hand
        )
        again = await store.writer.apply(
            [(retried, (TOPIC, 0, 7))], {(TOPIC, 0): 8}, CONSUMER, None, hand
        )

        # then the step is applied once, as first seen; the repeats are skipped, no conflict
        assert first == ApplyResult(applied=2, skipped=1)
        assert again == ApplyResult(applied=0, skipped=1)
        assert handed == []
        assert [h.event for h in await store.audits.history("a-1")] == [start, step]
        row = await store.audits.get("a-1")
        assert row is not None and row.version == 2 and row.state.pages_crawled == 3
        assert await store.writer.stored_offsets(CONSUMER) == {(TOPIC, 0): 8}

    async def test_an_event_id_reused_under_another_audit_is_another_event(
        self, store: ProjectionStore
    ) -> None:
        # given an audit's start applied
        one = started("a-1", at(0))
        await store.writer.apply(positioned([one]), {}, CONSUMER)

        # when another audit's start with the same event_id comes, alone and then in a batch
        # with a third audit's
        two = same_id(started("a-2", at(1)), one)
        three = same_id(started("a-3", at(2)), one)
        alone = await store.writer.apply([(two, (TOPIC, 0, 5))], {}, CONSUMER)
        both = await store.writer.apply(
            [(three, (TOPIC, 0, 6)), (two, (TOPIC, 0, 7))], {}, CONSUMER
        )

        # then each audit has its own event: applied, never dropped
        assert alone == ApplyResult(applied=1, skipped=0)
        assert both == ApplyResult(applied=1, skipped=1)
        for event in (one, two, three):
            assert [h.event for h in await store.audits.history(event.audit_id)] == [event]
            assert (await store.audits.get(event.audit_id)) is not None

    async def test_a_conflict_is_refused_handed_over_and_the_first_content_wins(
        self, store: ProjectionStore
    ) -> None:
        # given an audit whose step is applied
        start = started("a-1", at(0))
        step = progressed("a-1", at(1), pages_crawled=3)
        await store.writer.apply(positioned([start, step]), {}, CONSUMER)
        handed: list[list[tuple[int, str]]] = []

        async def hand(conflicts: Sequence[tuple[int, str]]) -> None:
            handed.append(list(conflicts))

        # when a batch holds the step's id with other data, then a fresh event, then the same
        # new id twice with other types
        other_data = same_id(progressed("a-1", at(2), pages_crawled=99), step)
        fresh = progressed("a-1", at(3), pages_crawled=4)
        other_type = same_id(completed("a-1", at(4)), fresh)
        batch = [(other_data, (TOPIC, 0, 2)), (fresh, (TOPIC, 0, 3)), (other_type, (TOPIC, 0, 4))]
        result = await store.writer.apply(batch, {(TOPIC, 0): 5}, CONSUMER, None, hand)

        # then the conflicts are refused and handed over by index, naming the reason and id
        assert (result.applied, result.skipped) == (1, 0)
        assert [i for i, _ in result.conflicts] == [0, 2]
        assert handed == [list(result.conflicts)]
        for (_, reason), event in zip(result.conflicts, (other_data, other_type), strict=True):
            assert reason.startswith("event_id_conflict: ")
            assert str(event.event_id) in reason and "a-1" in reason
        assert "other type (AuditProgressed)" in result.conflicts[1][1]
        # and the first content stays: the history and the row as without the conflicts
        assert [h.event for h in await store.audits.history("a-1")] == [start, step, fresh]
        row = await store.audits.get("a-1")
        assert row is not None and (row.status, row.state.pages_crawled) == ("running", 4)
        assert await store.writer.stored_offsets(CONSUMER) == {(TOPIC, 0): 5}

    async def test_a_batch_whose_conflicts_cannot_be_set_aside_is_not_applied(
        self, store: ProjectionStore
    ) -> None:
        # given an audit's start applied
        start = started("a-1", at(0))
        await store.writer.apply(positioned([start]), {}, CONSUMER)

        async def refuse(conflicts: Sequence[tuple[int, str]]) -> None:
            raise RuntimeError("the dead-letter topic is down")

        # when a batch with a conflict cannot hand it over
        clash = same_id(completed("a-1", at(1)), start)
        step = progressed("a-1", at(2), pages_crawled=1)
        batch = [(clash, (TOPIC, 0, 1)), (step, (TOPIC, 0, 2))]
        with pytest.raises(RuntimeError, match="dead-letter"):
            await store.writer.apply(batch, {(TOPIC, 0): 3}, CONSUMER, None, refuse)

        # then nothing of the batch is kept: it is read again, never past the conflict
        assert [h.event for h in await store.audits.history("a-1")] == [start]
        assert await store.writer.stored_offsets(CONSUMER) == {}
