"""The contract of :class:`~projections.budget.RequestBudget`, the Workflows API's request budget
and pauses, shared by stores on one database: every adapter passes it unchanged.

Abstract (see :mod:`tests.contracts.projection_store` for what a backend provides).
"""

from __future__ import annotations

from projections.store import ProjectionStore
from tests.contracts.projection_store import (
    MakeStore,
    StoreFixtures,
    at,
)

__all__ = ["RequestBudgetContract"]


class RequestBudgetContract(StoreFixtures):
    async def test_the_request_budget_is_shared_and_slides(
        self, store: ProjectionStore, make_store: MakeStore
    ) -> None:
        async with make_store() as other:
            # given a budget of 3 requests per 10 s shared by two processes
            grants = [
                await s.budget.take_request_slot("acct", at(seconds=i), 3, 10.0)
                for i, s in enumerate([store, other, store, other])
            ]

            # then the fourth is refused until the first leaves the window
            assert [g.granted for g in grants] == [True, True, True, False]
            assert grants[3].frees_at == at(seconds=10)
            assert await other.budget.requests_in_window("acct", at(seconds=3), 10.0) == 3
            later = await other.budget.take_request_slot("acct", at(seconds=10), 3, 10.0)
            assert later.granted is True
            # and another account has a budget of its own
            assert (await store.budget.take_request_slot("other", at(seconds=3), 3, 10.0)).granted

    async def test_a_pause_holds_every_process_until_it_ends(
        self, store: ProjectionStore, make_store: MakeStore
    ) -> None:
        async with make_store() as other:
            # given a 429 seen by one process
            await store.budget.pause_requests("acct", at(seconds=30))
            await store.budget.pause_requests(
                "acct", at(seconds=20)
            )  # an earlier end does not shorten it

            # then the other process is held until the pause ends, and takes nothing meanwhile
            held = await other.budget.take_request_slot("acct", at(seconds=5), 100, 300.0)
            assert (held.granted, held.paused_until) == (False, at(seconds=30))
            assert await other.budget.requests_paused_until("acct", at(seconds=5)) == at(seconds=30)
            assert await other.budget.requests_in_window("acct", at(seconds=5), 300.0) == 0
            assert await other.budget.requests_paused_until("acct", at(seconds=30)) is None
            assert (
                await other.budget.take_request_slot("acct", at(seconds=30), 100, 300.0)
            ).granted

    async def test_a_spender_share_is_capped_across_processes(
        self, store: ProjectionStore, make_store: MakeStore
    ) -> None:
        async with make_store() as other:
            # given a budget of 4 requests per 10 s, of which status reads may take 2
            reads = [
                await s.budget.take_request_slot(
                    "acct", at(seconds=i), 4, 10.0, spender="on_demand", share=2
                )
                for i, s in enumerate([store, other, store])
            ]

            # then the third read is refused for the share, from either process, and says
            # when the readers' oldest request leaves the window
            assert [r.granted for r in reads] == [True, True, False]
            assert (reads[2].share_spent, reads[2].frees_at) == (True, at(seconds=10))
            # and the rest of the window stays for the watchdog
            watchdog = [
                await s.budget.take_request_slot("acct", at(seconds=3), 4, 10.0, spender="watchdog")
                for s in (other, store, other)
            ]
            assert [w.granted for w in watchdog] == [True, True, False]
            assert not watchdog[2].share_spent
            assert await store.budget.requests_in_window("acct", at(seconds=3), 10.0) == 4
            spent = await other.budget.requests_in_window(
                "acct", at(seconds=3), 10.0, spender="on_demand"
            )
            assert spent == 2
            # and once the first read leaves the window the readers' share has room again
            again = await other.budget.take_request_slot(
                "acct", at(seconds=10), 4, 10.0, spender="on_demand", share=2
            )
            assert again.granted

    async def test_a_spender_within_its_share_still_needs_a_free_slot(
        self, store: ProjectionStore
    ) -> None:
        # given a window the watchdog filled
        for i in range(3):
            assert (
                await store.budget.take_request_slot(
                    "acct", at(seconds=i), 3, 10.0, spender="watchdog"
                )
            ).granted
        # then a read within its share is refused for the full window, not for its share
        read = await store.budget.take_request_slot(
            "acct", at(seconds=4), 3, 10.0, spender="on_demand", share=2
        )
        assert (read.granted, read.share_spent, read.frees_at) == (False, False, at(seconds=10))

    async def test_the_watchdog_floor_is_never_taken_by_other_spenders(
        self, store: ProjectionStore, make_store: MakeStore
    ) -> None:
        async with make_store() as other:
            # given a budget of 5 requests per 10 s, of which 2 are reserved for the watchdog,
            # and status reads allowed the whole window by their share
            def take(s: ProjectionStore, second: int, spender: str, share: int | None = None):
                return s.budget.take_request_slot(
                    "acct", at(seconds=second), 5, 10.0, spender=spender, share=share, reserve=2
                )

            # when reads and other spenders, from both processes, ask for every slot
            reads = [await take(s, i, "on_demand", 5) for i, s in enumerate([store, other])]
            manual = await take(store, 2, "manual")
            refused = [
                await take(other, 3, "on_demand", 5),
                await take(store, 3, "manual"),
                await take(other, 3, "other"),
            ]

            # then they got the unreserved 3 and were refused the rest for the reserve, told
            # when their oldest request leaves the window
            assert [r.granted for r in reads] == [True, True] and manual.granted
            assert [(r.granted, r.reserved, r.share_spent) for r in refused] == [
                (False, True, False)
            ] * 3
            assert refused[0].frees_at == at(seconds=10)
            # and the watchdog still takes its floor, from either process, and no more
            watchdog = [await take(s, 4, "watchdog") for s in (other, store, other)]
            assert [w.granted for w in watchdog] == [True, True, False]
            assert not watchdog[2].reserved
            assert await store.budget.requests_in_window("acct", at(seconds=4), 10.0) == 5
            # and once the first read leaves the window another spender has room again
            assert (await take(other, 10, "manual")).granted

    async def test_the_watchdog_may_spend_beyond_its_floor(self, store: ProjectionStore) -> None:
        # given a budget of 3 with 1 reserved for the watchdog
        grants = [
            await store.budget.take_request_slot(
                "acct", at(seconds=i), 3, 10.0, spender="watchdog", reserve=1
            )
            for i in range(3)
        ]
        # then the watchdog may take the whole window, and a read then needs a free slot
        assert [g.granted for g in grants] == [True, True, True]
        read = await store.budget.take_request_slot(
            "acct", at(seconds=3), 3, 10.0, spender="on_demand", share=3, reserve=1
        )
        assert (read.granted, read.frees_at) == (False, at(seconds=10))
