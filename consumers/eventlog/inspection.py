"""The event log's inspection port: what a log holds, read outside any consumer group — its
partitions, the offsets at their ends, at their starts and at a time, a range of records, one
record by its position, a partition backwards, and a group's committed offsets.

Users: lifecycle retention (how far every consumer got, what to keep), the reconciler and
telemetry (folding a partition's history on assignment), the projector's freshness and a
rebuild (how far the log goes), and the dead-letter operations (listing, showing and replaying
one by its position). Every method is a read; appending and consuming are the handle's
(:class:`~consumers.eventlog.port.EventLog`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator

from consumers.eventlog.values import Record

__all__ = ["LogInspection"]


class LogInspection(ABC):
    @abstractmethod
    async def partitions(self, topic: str) -> list[int]: ...

    @abstractmethod
    async def end_offsets(self, topic: str) -> dict[int, int]:
        """The next offset to be written, per partition."""

    @abstractmethod
    async def start_offsets(self, topic: str) -> dict[int, int]:
        """The first offset still held, per partition (0 until records are trimmed)."""

    @abstractmethod
    async def offsets_at(self, topic: str, at_ms: int) -> dict[int, int]:
        """Per partition, the offset of the first record written at or after ``at_ms``
        (milliseconds since the epoch); the end offset when there is none."""

    @abstractmethod
    def read(
        self, topic: str, partition: int, start: int, end: int | None = None
    ) -> AsyncIterator[list[Record]]:
        """Batches of records of one partition from ``start`` up to ``end`` (exclusive;
        ``None``: the end at the time of the call), outside any consumer group."""

    async def record_at(self, topic: str, partition: int, offset: int) -> Record | None:
        """The record of ``partition`` at ``offset``; ``None`` when there is none (never
        written, trimmed, or an offset Kafka gave a transaction marker). Looking a record up
        by its position is how an operator names one (a dead letter)."""
        if partition not in await self.end_offsets(topic) or offset < 0:
            return None
        async for batch in self.read(topic, partition, offset, offset + 1):
            for record in batch:
                if record.offset == offset:
                    return record
        return None

    async def read_before(
        self, topic: str, partition: int, before: int | None, limit: int
    ) -> list[Record]:
        """Up to ``limit`` records of one partition before offset ``before`` (``None``: the
        end), newest first: reading a topic backwards, a window at a time, so the newest few
        of a long partition cost what they hold, not what the partition holds."""
        if limit <= 0:
            return []
        ends = await self.end_offsets(topic)
        if partition not in ends:
            return []
        first = (await self.start_offsets(topic)).get(partition, 0)
        end = ends[partition] if before is None else min(before, ends[partition])
        found: list[Record] = []
        window = limit
        while end > first and len(found) < limit:
            start = max(first, end - window)
            batch: list[Record] = []
            async for records in self.read(topic, partition, start, end):
                batch.extend(records)
            found.extend(reversed(batch))
            end = start
            window *= 2  # gaps (Kafka's transaction markers) make a window hold fewer
        return found[:limit]

    @abstractmethod
    async def group_offsets(self, group: str, topic: str) -> dict[int, int]:
        """The committed next offsets of ``group`` for ``topic``: never older than a commit
        that has returned (a transactional commit's offsets included)."""
