"""The contract of :class:`~projections.sweeps.Sweeps`, sweeps awaiting the brake's verdict, judged
by one claimant at a time: every adapter passes it unchanged.

Abstract (see :mod:`tests.contracts.projection_store` for what a backend provides).
"""

from __future__ import annotations

import asyncio

from projections.store import ProjectionStore
from tests.contracts.projection_store import (
    MakeStore,
    StoreFixtures,
    at,
)

__all__ = ["SweepsContract"]


class SweepsContract(StoreFixtures):
    async def test_a_sweep_is_judged_by_one_claimant_until_its_lease_runs_out(
        self, store: ProjectionStore, make_store: MakeStore
    ) -> None:
        async with make_store() as other:
            # given an open sweep of two requests
            await store.sweeps.open_sweep("sweep-1", ["r-1", "r-2"], at(0), at(1))
            await store.sweeps.open_sweep("sweep-1", ["ignored"], at(0), at(1))  # idempotent
            [sweep] = await other.sweeps.open_sweeps()
            assert (sweep.sweep_id, sweep.requests, sweep.at, sweep.deadline) == (
                "sweep-1",
                ("r-1", "r-2"),
                at(0),
                at(1),
            )

            # when two processes claim its verdict at once, one wins
            claims = await asyncio.gather(
                store.sweeps.claim_sweep("sweep-1", "a", at(2), 60.0),
                other.sweeps.claim_sweep("sweep-1", "b", at(2), 60.0),
            )
            assert sorted(claims) == [False, True]
            winner, loser = ("a", "b") if claims[0] else ("b", "a")
            assert (
                await store.sweeps.claim_sweep("sweep-1", winner, at(2, 30), 60.0) is True
            )  # renews
            assert await store.sweeps.claim_sweep("sweep-1", loser, at(3, 29), 60.0) is False
            # then a claimant that died is taken over once its lease ran out
            assert await other.sweeps.claim_sweep("sweep-1", loser, at(3, 31), 60.0) is True

            # and a closed sweep is no longer open, nor claimable
            await store.sweeps.close_sweep("sweep-1", "released", 3, 90, at(4))
            assert await other.sweeps.open_sweeps() == []
            assert await store.sweeps.claim_sweep("sweep-1", "c", at(9), 60.0) is False
