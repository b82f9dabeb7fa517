"""The event log: append records to topics, consume them by consumer group, and look at what
it holds, seen through one port per concern.

:class:`EventLog` is the handle and the hot path: its lifecycle (``start``/``stop``,
``async with``, ``init``, ``ping``), appending, and consumers. What the log holds is read
through its ports, given as attributes, so a caller names the concern it uses:

- ``inspection`` (:mod:`consumers.eventlog.inspection`): partitions, offsets, reading records
  outside a consumer group, a group's committed offsets;
- ``retention`` (:mod:`consumers.eventlog.retention`): trimming a partition's oldest records;
- ``dead_letters`` (:mod:`consumers.eventlog.letters`): setting records aside, each bad source
  record once (:meth:`EventLog.append` and :meth:`Consumer.commit` route the dead letters
  among their records there first).

Two adapters implement the handle and every port: ``sqlite/`` (one partition a topic, zero
setup) and ``kafka/``, one module per port sharing the backend's connection. Both pass each
suite in ``tests/contracts/`` (``eventlog.py`` for the handle, ``eventlog_inspection.py``,
``eventlog_retention.py``, ``eventlog_dead_letters.py``).

Delivery is at-least-once. :meth:`Consumer.commit` appends a consumer's outputs and moves its
offsets *together* (a SQLite transaction; a Kafka transaction), so a consumer whose outputs
are derived deterministically from its inputs produces each output exactly once.

Records are bytes (``values.py``); ``codec.py`` translates events, and ``factory.py`` picks
the adapter by URL.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence

from consumers.eventlog.inspection import LogInspection
from consumers.eventlog.letters import DeadLetterBox
from consumers.eventlog.retention import LogRetention
from consumers.eventlog.values import OutRecord, Record, TopicPartition, Topics
from statemachine.longlived import LongLived

__all__ = [
    "AssignCallback",
    "Consumer",
    "DeadLetterBox",
    "EventLog",
    "LogInspection",
    "LogRetention",
    "OutRecord",
    "Record",
    "TopicPartition",
    "Topics",
]

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
        """Append ``outputs`` and set the group's next offsets, atomically. Dead letters among
        ``outputs`` are set aside through the log's ``dead_letters`` port, before the offsets
        move (atomically with them on SQLite; before the transaction on Kafka)."""

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
    """A partitioned log of topics. ``async with`` starts and stops it; both are idempotent.
    A port used while the log is stopped raises a non-retriable
    :class:`~statemachine.errors.EventLogError`."""

    topics: Topics
    inspection: LogInspection
    retention: LogRetention
    dead_letters: DeadLetterBox

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def stop(self) -> None: ...

    @abstractmethod
    async def init(self) -> list[str]:
        """Create the topics that are missing (idempotent); returns the ones created."""

    @abstractmethod
    async def ping(self) -> None:
        """Raise :class:`~statemachine.errors.EventLogError` when the log is unreachable."""

    @abstractmethod
    async def append(self, records: Sequence[OutRecord]) -> None:
        """Append durably (returns once acknowledged). Order is kept per key. Dead letters
        among ``records`` are set aside first, through :attr:`dead_letters` (kept once per
        source record)."""

    def partition_for(self, key: str, partitions: int) -> int:
        """The partition :meth:`append` puts a key in, of ``partitions`` (the adapters agree
        with their own producer)."""
        return 0

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
