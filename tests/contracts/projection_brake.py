"""The contract of :class:`~projections.brake.BrakeStore`, the mass-failure brake and the audits
whose decisions it holds: every adapter passes it unchanged.

Abstract (see :mod:`tests.contracts.projection_store` for what a backend provides).
"""

from __future__ import annotations

import asyncio

from projections.store import ProjectionStore
from tests.contracts.projection_store import (
    CONSUMER,
    MakeStore,
    StoreFixtures,
    at,
    held,
    positioned,
    pure_fold,
    released,
    same_row,
    started,
)

__all__ = ["BrakeStoreContract"]


class BrakeStoreContract(StoreFixtures):
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
        await store.writer.apply(positioned(events), {}, CONSUMER)

        # then the rows carry the holds as the fold does, and the list is oldest hold first
        rows = await self.rows_of(store)
        assert all(same_row(rows[k], v) for k, v in pure_fold(events).items())
        listed = await store.brake.held_audits()
        assert [(r.audit_id, r.state.held_decision_id) for r in listed] == [
            ("a-b", str(hold_b.event_id)),
            ("a-a", str(hold_a.event_id)),
        ]
        assert listed[0].state.held_at == at(5)
        assert [r.audit_id for r in await store.brake.held_audits(limit=1)] == ["a-b"]

    async def test_the_brake_engages_once_and_ends_with_who_ended_it(
        self, store: ProjectionStore, make_store: MakeStore
    ) -> None:
        async with make_store() as other:
            assert (await store.brake.state()).engaged is False

            # when two sweeps trip the brake at once, one engages it
            first, second = await asyncio.gather(
                store.brake.engage_brake("sweep-1", 30, 40, at(1)),
                other.brake.engage_brake("sweep-2", 25, 30, at(1)),
            )
            assert sorted([first, second]) == [False, True]
            state = await other.brake.state()
            assert state.engaged is True and state.since == at(1)
            assert (state.sweep_id, state.lost, state.observations) in (
                ("sweep-1", 30, 40),
                ("sweep-2", 25, 30),
            )
            assert (
                await store.brake.engage_brake("sweep-3", 99, 99, at(2)) is False
            )  # stays as it was
            assert (await store.brake.state()).since == at(1)

            # then ending it says how it was and records who ended it
            before = await other.brake.end_brake("released", "cli:ops", at(3))
            assert before.engaged is True
            after = await store.brake.state()
            assert (after.engaged, after.ended_by, after.how, after.ended_at) == (
                False,
                "cli:ops",
                "released",
                at(3),
            )
            assert (await store.brake.end_brake("discarded", "x", at(4))).engaged is False
            assert (await store.brake.state()).how == "released"  # nothing to end: unchanged
            assert await store.brake.engage_brake("sweep-4", 20, 21, at(5)) is True  # engages again
