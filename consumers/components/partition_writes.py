"""Store writes under way at once, each over some log partitions, in each partition's order.

A write starts once every earlier write over any of its partitions has ended, and is never
made when one of them did not commit: it raises that write's error instead (the records before
its own were not stored, so storing its offsets would step over them). Writes over different
partitions proceed at once; an audit lives in one partition, so they share no row.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

__all__ = ["PartitionWrites"]


class PartitionWrites:
    def __init__(self) -> None:
        self._last: dict[tuple[str, int], asyncio.Task[None]] = {}  # by partition
        self._under_way: set[asyncio.Task[None]] = set()

    def start(
        self, partitions: Iterable[tuple[str, int]], write: Callable[[], Awaitable[None]]
    ) -> asyncio.Task[None]:
        """Run ``write()`` after the earlier writes over ``partitions``; its task."""
        partitions = list(partitions)
        before = {self._last[tp] for tp in partitions if tp in self._last}
        task = asyncio.create_task(self._after(before, write))
        self._under_way.add(task)
        task.add_done_callback(self._under_way.discard)
        for tp in partitions:
            self._last[tp] = task
        return task

    @staticmethod
    async def _after(before: set[asyncio.Task[None]], write: Callable[[], Awaitable[None]]) -> None:
        if before:
            await asyncio.wait(before)  # cancelling this write leaves those to theirs
            for earlier in before:
                earlier.result()
        await write()

    async def end(self, *, cancel: bool = False) -> None:
        """Wait for every write under way to end (cancelling them first when ``cancel``),
        whatever its outcome, and start afresh."""
        if cancel:
            for task in self._under_way:
                task.cancel()
        await asyncio.gather(*self._under_way, return_exceptions=True)
        self._last.clear()
