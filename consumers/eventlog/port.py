"""The event log port: append records to topics, consume them by consumer group.

An :class:`EventLog` is a partitioned, append-only log with per-group offsets. Two adapters
implement it: ``sqlite/`` (one partition a topic, zero setup) and ``kafka/``. Both pass
``tests/contracts/eventlog.py``.

Delivery is at-least-once. :meth:`Consumer.commit` appends a consumer's outputs and moves its
offsets *together* (a SQLite transaction; a Kafka transaction), so a consumer whose outputs
are derived deterministically from its inputs produces each output exactly once.

Records are bytes; ``codec.py`` translates events, and ``factory.py`` picks the adapter by URL.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from statemachine.longlived import LongLived

__all__ = [
    "AssignCallback",
    "Consumer",
    "EventLog",
    "OutRecord",
    "Record",
    "TopicPartition",
    "Topics",
]

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Topics:
    prefix: str = "audit"
    group_prefix: str | None = None

    @property
    def lifecycle(self) -> str:
        return f"{self.prefix}.lifecycle.v1"

    @property
    def probe_requests(self) -> str:
        return f"{self.prefix}.probe-requests.v1"

    @property
    def dead_letter(self) -> str:
        return f"{self.prefix}.dead-letter.v1"

    def all(self) -> tuple[str, str, str]:
        return (self.lifecycle, self.probe_requests, self.dead_letter)

    def group(self, component: str) -> str:
        """The consumer group of ``component``: ``<group prefix>-<component>``, the group
        prefix being the topic prefix unless set apart, so environments sharing a cluster
        never join each other's groups."""
        return f"{self.group_prefix or self.prefix}-{component}"


class Record(NamedTuple):
    """A record as consumed: where it sits, and its bytes."""

    topic: str
    partition: int
    offset: int
    key: str | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp_ms: int = 0


@dataclass(frozen=True, slots=True)
class OutRecord:
    """A record to append. ``key`` picks the partition (the audit id), unless ``partition``
    is given: the partition of the record it was derived from, in the same topic (a decision
    stays with the events it was made from, whichever partitioner their publisher used). A log
    with one partition per topic has no choice to make."""

    topic: str
    key: str
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = field(default=())
    partition: int | None = None


AssignCallback = Callable[["Consumer", Sequence[TopicPartition]], Awaitable[None]]


class Consumer(LongLived, ABC):
    """A member of a consumer group. ``async with`` starts and stops it.

    ``on_assign`` runs before any record of a newly assigned partition is returned, so a
    consumer can rebuild state or :meth:`seek` to offsets it stored elsewhere. ``on_revoke``
    runs before partitions are taken away; a consumer should commit what it has finished.
    """

    group: str

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def stop(self) -> None: ...

    @abstractmethod
    async def poll(self, max_records: int = 1000, timeout: float = 1.0) -> list[Record]:
        """The next records of the assigned partitions, in order per partition; ``[]`` after
        ``timeout`` seconds without any."""

    @abstractmethod
    async def commit(
        self, offsets: Mapping[TopicPartition, int], outputs: Sequence[OutRecord] = ()
    ) -> None:
        """Append ``outputs`` and set the group's next offsets, atomically."""

    @abstractmethod
    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Make the next :meth:`poll` of ``tp`` start at ``offset``."""

    @abstractmethod
    def assignment(self) -> frozenset[TopicPartition]: ...

    @abstractmethod
    async def committed(self) -> dict[TopicPartition, int]:
        """The group's committed next offsets for the assigned partitions."""

    @abstractmethod
    async def lags(self) -> dict[TopicPartition, int]:
        """Per assigned partition, the records not yet returned by :meth:`poll`."""

    async def lag(self) -> int:
        """Records in the assigned partitions not yet returned by :meth:`poll`."""
        return sum((await self.lags()).values())


class EventLog(LongLived, ABC):
    """A partitioned log of topics. ``async with`` starts and stops it; both are idempotent."""

    topics: Topics

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def stop(self) -> None: ...

    @abstractmethod
    async def init(self) -> list[str]:
        """Create the topics that are missing (idempotent); returns the ones created."""

    @abstractmethod
    async def append(self, records: Sequence[OutRecord]) -> None:
        """Append durably (returns once acknowledged). Order is kept per key."""

    @abstractmethod
    def consumer(
        self,
        group: str,
        topics: Sequence[str],
        *,
        on_assign: AssignCallback | None = None,
        on_revoke: AssignCallback | None = None,
        transactional: bool = False,
    ) -> Consumer:
        """A consumer in ``group``. Without a committed offset it starts at the beginning.
        ``transactional`` consumers' :meth:`Consumer.commit` is atomic with its outputs (on
        Kafka this uses a transactional producer; other consumers read committed data only)."""

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
    async def trim(self, topic: str, before: Mapping[int, int]) -> None:
        """Delete the records of each partition before the offset given (the last record of
        a partition is always kept, so no offset is ever handed out twice)."""

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

    @abstractmethod
    async def ping(self) -> None:
        """Raise :class:`~statemachine.errors.EventLogError` when the log is unreachable."""

    def partition_for(self, key: str, partitions: int) -> int:
        """The partition of a key (the adapters agree with their own producer)."""
        return 0
