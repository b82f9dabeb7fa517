"""The contract of :class:`~projections.coordination.Coordination`, the watchdog lock, tick claims
and heartbeats, across stores sharing one database: every adapter passes it unchanged.

Abstract (see :mod:`tests.contracts.projection_store` for what a backend provides).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from projections.store import ProjectionStore
from tests.contracts.projection_store import (
    MakeStore,
    StoreFixtures,
    at,
)

__all__ = ["CoordinationContract"]


class CoordinationContract(StoreFixtures):
    async def test_watchdog_lock_is_exclusive_between_stores(
        self, store: ProjectionStore, make_store: MakeStore
    ) -> None:
        async with make_store() as other:
            async with store.coordination.watchdog_lock() as held:
                assert held is True
                async with other.coordination.watchdog_lock() as also:
                    assert also is False
            async with other.coordination.watchdog_lock() as now_free:
                assert now_free is True
                async with store.coordination.watchdog_lock() as blocked:
                    assert blocked is False
            async with store.coordination.watchdog_lock() as back:
                assert back is True

    async def test_watchdog_lock_is_released_when_the_tick_fails(
        self, store: ProjectionStore, make_store: MakeStore
    ) -> None:
        async with make_store() as other:
            with pytest.raises(RuntimeError, match="tick failed"):
                async with store.coordination.watchdog_lock() as held:
                    assert held is True
                    raise RuntimeError("tick failed")
            async with other.coordination.watchdog_lock() as free:
                assert free is True

    async def test_watchdog_lock_is_released_when_the_tick_is_cancelled(
        self, store: ProjectionStore, make_store: MakeStore
    ) -> None:
        entered = asyncio.Event()

        async def tick() -> None:
            async with store.coordination.watchdog_lock() as held:
                assert held is True
                entered.set()
                await asyncio.Event().wait()  # holds the lock until cancelled

        task = asyncio.create_task(tick())
        await asyncio.wait_for(entered.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        async with make_store() as other, other.coordination.watchdog_lock() as free:
            assert free is True

    async def test_a_tick_slot_is_claimed_once_across_stores(
        self, store: ProjectionStore, make_store: MakeStore
    ) -> None:
        async with make_store() as other:
            # given two processes racing for the same interval slot
            first, second = await asyncio.gather(
                store.coordination.claim_tick("watchdog", 42, "a"),
                other.coordination.claim_tick("watchdog", 42, "b"),
            )

            # then exactly one of them ticks; the next slot, and another job, are free again
            assert sorted([first, second]) == [False, True]
            assert await store.coordination.claim_tick("watchdog", 42, "a") is False
            assert await other.coordination.claim_tick("watchdog", 43, "b") is True
            assert await store.coordination.claim_tick("telemetry-report", 42, "a") is True

    async def test_heartbeats_and_live_components(self, store: ProjectionStore) -> None:
        now = at(100)
        await store.coordination.heartbeat(
            "host-a:1", ["projector", "reconciler"], now - timedelta(minutes=5)
        )
        await store.coordination.heartbeat("host-b:2", ["projector", "watchdog"], now)
        await store.coordination.heartbeat(
            "host-a:1", ["projector"], now
        )  # refreshes one component
        live = await store.coordination.live_components(now - timedelta(minutes=1))
        assert {k: sorted(v) for k, v in live.items()} == {
            "projector": ["host-a:1", "host-b:2"],
            "watchdog": ["host-b:2"],
        }
        everything = await store.coordination.live_components(now - timedelta(hours=1))
        assert sorted(everything["reconciler"]) == ["host-a:1"]
        # a heartbeat exactly at `since` counts
        assert sorted((await store.coordination.live_components(now))["projector"]) == [
            "host-a:1",
            "host-b:2",
        ]
        await store.coordination.forget_process("host-a:1")
        live = await store.coordination.live_components(now - timedelta(hours=1))
        assert {k: sorted(v) for k, v in live.items()} == {
            "projector": ["host-b:2"],
            "watchdog": ["host-b:2"],
        }
        await store.coordination.forget_process("host-unknown")  # no error

    async def test_ending_a_tokens_sessions_moves_its_generation_on_for_every_store(
        self, store: ProjectionStore, make_store: MakeStore
    ) -> None:
        async with make_store() as other:
            assert await store.coordination.session_generation("ops") == 0
            assert await store.coordination.end_sessions("ops", at(0)) == 1
            assert await other.coordination.session_generation("ops") == 1  # another replica
            assert await other.coordination.session_generation("viewer") == 0  # its own
            assert await other.coordination.end_sessions("ops", at(1)) == 2
            assert await store.coordination.session_generation("ops") == 2

    async def test_concurrent_logouts_each_move_the_generation_once(
        self, store: ProjectionStore, make_store: MakeStore
    ) -> None:
        async with make_store() as other:
            ended = await asyncio.gather(
                *(s.coordination.end_sessions("ops", at(0)) for s in (store, other) * 5)
            )
            assert sorted(ended) == list(range(1, 11))
            assert await store.coordination.session_generation("ops") == 10
