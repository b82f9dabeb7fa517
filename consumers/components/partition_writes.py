"""Store writes under way at once, each over some log partitions, in each partition's order.

A write starts once every earlier write over any of its partitions has ended, and is never
made when one of them did not commit: it raises that write's error instead (the records before
its own were not stored, so storing its offsets would step over them). Writes over different
partitions proceed at once; an audit lives in one partition, so they share no row.

:class:`BatchWrites` keeps the writes of the last few batches (the projector's parts, the
reconciler's commits), so a consumer handles its next batch while the one before is written,
and awaits them oldest batch first, each batch's follow-up once it is written.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Iterable

__all__ = ["BatchWrites", "PartitionWrites"]


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


class BatchWrites:
    """The writes of the batches (or parts of one) not yet awaited, in
    :class:`PartitionWrites`' order, each batch with what to do once it is written."""

    def __init__(self) -> None:
        self._writes = PartitionWrites()
        self._batches: deque[tuple[list[asyncio.Task[None]], Callable[[], Awaitable[None]] | None]]
        self._batches = deque()

    def __len__(self) -> int:
        """The batches whose writes are not awaited yet."""
        return len(self._batches)

    def start(
        self,
        writes: Iterable[tuple[Iterable[tuple[str, int]], Callable[[], Awaitable[None]]]],
        then: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Start a batch's writes, each ``(partitions, write)``; ``then()`` is awaited once
        they all succeeded, by the :meth:`flush` that finds them done."""
        tasks = [self._writes.start(tps, write) for tps, write in writes]
        self._batches.append((tasks, then))

    async def flush(self, keep: int = 0) -> None:
        """Wait until the writes of at most ``keep`` batches are not awaited yet, oldest first.
        A failed write raises its error (its batch stays, for :meth:`end`)."""
        while len(self._batches) > keep:
            tasks, then = self._batches[0]
            for write in tasks:  # cancelling a flush leaves the writes to the next flush
                await asyncio.shield(write)  # or to end()
            self._batches.popleft()
            if then is not None:
                await then()

    async def end(self, *, cancel: bool = False) -> None:
        """Wait for every write to end (cancelling them first when ``cancel``), whatever its
        outcome, and start afresh."""
        await self._writes.end(cancel=cancel)
        self._batches.clear()
