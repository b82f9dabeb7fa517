"""The ``outcomes`` component: every endpoint's feed in one component, each stepped on its own
so that a slow endpoint never delays another's."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from consumers.components.outcomes.feed import Feed
from consumers.runtime.component import Component

__all__ = ["Outcomes"]


class Outcomes(Component):
    name = "outcomes"
    group = "outcomes"  # lag is reported: the slowest endpoint's, per partition
    drains = True

    def __init__(self, feeds: Sequence[Feed]) -> None:
        self.feeds = list(feeds)
        self._steps: dict[Feed, asyncio.Task[int]] = {}

    async def start(self) -> None:
        for feed in self.feeds:
            await feed.start()

    async def stop(self) -> None:
        for task in self._steps.values():
            task.cancel()
        for task in self._steps.values():
            with contextlib.suppress(BaseException):
                await task
        self._steps.clear()
        for feed in self.feeds:
            await feed.stop()

    async def step(self) -> int:
        """Step every feed whose last step has ended; return once one has (a feed's step
        that raises raises here, and the supervisor restarts the component)."""
        for feed in self.feeds:
            if feed not in self._steps:
                self._steps[feed] = asyncio.create_task(feed.step())
        done, _ = await asyncio.wait(self._steps.values(), return_when=asyncio.FIRST_COMPLETED)
        handled = 0
        for feed, task in list(self._steps.items()):
            if task in done:
                del self._steps[feed]
                handled += task.result()
        return handled

    async def lags(self) -> dict[tuple[str, int], int]:
        lags: dict[tuple[str, int], int] = {}
        for feed in self.feeds:
            for tp, lag in (await feed.lags()).items():
                lags[tp] = max(lags.get(tp, 0), lag)
        return lags

    async def idle(self) -> bool:
        return all([await feed.idle() for feed in self.feeds])
