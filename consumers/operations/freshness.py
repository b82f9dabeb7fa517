"""How far the projection is behind the log, so reads and sweeps can wait for it.

The projector stores, per partition, the offset after the last record it applied. The log's
end offset can be further when the partition ends with transaction markers or aborted writes
(the reconciler and the probe write transactionally), which are not records; so a small gap is
settled by looking.
"""

from __future__ import annotations

import asyncio
import time

from consumers.components.projector import Projector
from consumers.eventlog.port import EventLog
from projections.store import ProjectionStore

__all__ = ["wait_for_projection"]

SMALL_GAP = 100


async def wait_for_projection(log: EventLog, store: ProjectionStore, timeout: float) -> bool:
    """Wait until the projection has applied what the log held when called; False on timeout."""
    deadline = time.monotonic() + timeout
    topic = log.topics.lifecycle
    target = await log.end_offsets(topic)
    while True:
        stored = await store.stored_offsets(log.topics.group(Projector.name))
        gaps = {p: end - stored.get((topic, p), 0) for p, end in target.items()}
        if all(gap <= 0 for gap in gaps.values()):
            return True
        if all(gap <= SMALL_GAP for gap in gaps.values()):
            # A small gap may hold no records at all: transaction markers, aborted writes.
            unread = 0
            for partition, gap in gaps.items():
                if gap > 0:
                    start = stored.get((topic, partition), 0)
                    async for batch in log.read(topic, partition, start, target[partition]):
                        unread += len(batch)
            if unread == 0:
                return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.05)
