"""How far the projection is behind the log, so reads and sweeps can wait for it.

The projector stores, per partition, the offset after the last record it applied. The log's
end offset can be further when the partition ends with transaction markers or aborted writes
(the reconciler and the probe write transactionally), which are not records; so a small gap is
settled by looking. What a look found empty is remembered, so a process that asks again — each
status read of an unknown audit, each watchdog tick — reads (and, on Kafka, opens a consumer)
only for offsets it has not looked at yet, not once per call.
"""

from __future__ import annotations

import asyncio
import time

from consumers.components.projector import Projector
from consumers.eventlog.port import EventLog
from projections.store import ProjectionStore

__all__ = ["Freshness", "wait_for_projection"]

SMALL_GAP = 100


class Freshness:
    """Waits for the projection to apply what the log holds, remembering, per partition of
    the lifecycle topic, the offsets past the projector's position that hold no records."""

    def __init__(self, log: EventLog, store: ProjectionStore) -> None:
        self.log = log
        self.store = store
        # partition -> (from, to): [from, to) holds no records; `from` is the projector's
        # stored position it was found at (if that moves, the knowledge is moot).
        self._empty: dict[int, tuple[int, int]] = {}
        self.reads = 0  # log reads made, for tests and curiosity

    async def wait(self, timeout: float) -> bool:
        """Wait until the projection has applied what the log held when called; False on
        timeout."""
        deadline = time.monotonic() + timeout
        topic = self.log.topics.lifecycle
        target = await self.log.inspection.end_offsets(topic)
        while True:
            stored = await self.store.writer.stored_offsets(self.log.topics.group(Projector.name))
            starts = {p: stored.get((topic, p), 0) for p in target}
            gaps = {p: end - starts[p] for p, end in target.items()}
            if all(gap <= 0 for gap in gaps.values()):
                return True
            # A small gap may hold no records at all: transaction markers, aborted writes.
            small = all(gap <= SMALL_GAP for gap in gaps.values())
            if small and await self._markers_only(gaps, starts, target):
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)

    async def _markers_only(
        self, gaps: dict[int, int], starts: dict[int, int], target: dict[int, int]
    ) -> bool:
        for partition, gap in gaps.items():
            if gap > 0 and not await self._empty_up_to(
                partition, starts[partition], target[partition]
            ):
                return False
        return True

    async def _empty_up_to(self, partition: int, start: int, end: int) -> bool:
        """Whether [start, end) of the partition holds no records, reading only what no
        earlier look covered."""
        known_from, known_to = self._empty.get(partition, (start, start))
        if known_from != start:
            known_to = start
        if known_to >= end:
            return True
        self.reads += 1
        async for batch in self.log.inspection.read(
            self.log.topics.lifecycle, partition, known_to, end
        ):
            if batch:
                return False
        self._empty[partition] = (start, end)
        return True


async def wait_for_projection(log: EventLog, store: ProjectionStore, timeout: float) -> bool:
    """:meth:`Freshness.wait` without memory of earlier looks."""
    return await Freshness(log, store).wait(timeout)
