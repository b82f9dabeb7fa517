"""The contract of :class:`~projections.writer.ProjectionWriter`, the projector's write: a batch
folded into rows and history with its offsets in one transaction, redeliveries skipped, offsets
read back, the reset: every adapter passes it unchanged.

Abstract (see :mod:`tests.contracts.projection_store` for what a backend provides).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from projections.store import ProjectionStore
from projections.values import ApplyResult
from statemachine.errors import StoreError
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
