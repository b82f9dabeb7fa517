"""The log consumer: a component fed by one consumer group of the event log.

It polls batches (growing under load), holds :attr:`LogConsumer.batch_lock` from poll to
commit so partitions change hands only between batches, sends what it cannot decode to the
dead-letter topic, and commits each input partition's offset with the outputs derived from it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import structlog

from consumers.components.batches import next_offsets, partitions_of
from consumers.eventlog.codec import dead_letter, decode
from consumers.eventlog.port import Consumer, EventLog, OutRecord, Record
from consumers.runtime.component import Component
from consumers.runtime.metrics import CONSUMER_PROGRESS, DEAD_LETTERED
from statemachine.errors import DecodeError
from statemachine.events import AuditEvent

__all__ = ["LogConsumer"]

log = structlog.get_logger("auditrec")


class LogConsumer(Component):
    """A component fed by one consumer group of the event log."""

    group: str
    drains = True
    transactional = False
    max_records = 5000
    linger = 0.05

    def __init__(self, event_log: EventLog, topics: Sequence[str]) -> None:
        self.log = event_log
        self.group = event_log.topics.group(self.name)
        self.topic_names = list(topics)
        self.consumer: Consumer | None = None
        self.dead_lettered = 0
        # Held from the moment a batch is polled until it is committed; a revocation waits
        # for it, so partitions change hands only between batches.
        self.batch_lock = asyncio.Lock()
        # Seeks made by assignments, counted: a batch polled before a partition was sought
        # holds records from the old position, which must not be handled (see step()).
        self._seeks = 0
        self.polled_at = 0  # the seek count when the batch in hand was first returned
        self._sought: dict[tuple[str, int], tuple[int, int]] = {}  # tp -> (seek number, offset)

    async def start(self) -> None:
        if self.consumer is not None:
            return
        self.consumer = self.log.consumer(
            self.group,
            self.topic_names,
            on_assign=self._assigned,
            on_revoke=self._revoked,
            transactional=self.transactional,
        )
        await self.consumer.start()

    async def stop(self) -> None:
        consumer, self.consumer = self.consumer, None
        if consumer is not None:
            await consumer.stop()

    async def on_assign(self, consumer: Consumer, partitions: Sequence[tuple[str, int]]) -> None:
        pass

    async def on_revoke(self, consumer: Consumer, partitions: Sequence[tuple[str, int]]) -> None:
        pass

    async def _revoked(self, consumer: Consumer, partitions: Sequence[tuple[str, int]]) -> None:
        async with self.batch_lock:
            await self.on_revoke(consumer, partitions)

    async def _assigned(self, consumer: Consumer, partitions: Sequence[tuple[str, int]]) -> None:
        async with self.batch_lock:
            await self.on_assign(consumer, partitions)

    async def step(self) -> int:
        """Poll a batch, then handle it under :attr:`batch_lock` until it is committed. While
        writes of the batches before are under way (:meth:`writing`), the next batch is polled
        only if one is at hand; when none is, those writes are awaited (:meth:`written`)
        before waiting for more."""
        if not self.writing():
            return await self.step_within(self.poll_timeout)
        handled = await self.step_within(0.0)
        if not handled:
            async with self.batch_lock:
                await self.written()
        return handled

    def writing(self) -> bool:
        """Whether writes of batches handled are still under way (a consumer that writes a
        batch while it handles the next one)."""
        return False

    async def written(self) -> None:
        """Wait for the writes under way; a failed one raises (the component restarts)."""

    async def step_within(self, wait: float) -> int:
        """:meth:`step`, waiting at most ``wait`` seconds for a first record."""
        records = await self.poll(wait)
        if not records:
            return 0
        async with self.batch_lock:
            mine = self.still_assigned(records)
            if self._seeks != self.polled_at:
                mine = self.not_sought_since(mine, self.polled_at)
            handled = await self._handle(mine) if mine else 0
            self.progressed(mine)
            return handled

    def progressed(self, records: list[Record]) -> None:
        """Record when each partition of ``records`` (handled) last made progress."""
        now = time.time()
        for tp in partitions_of(records):
            CONSUMER_PROGRESS.labels(self.name, tp[0], str(tp[1])).set(now)

    def seek(self, consumer: Consumer, tp: tuple[str, int], offset: int) -> None:
        """Set where ``tp`` is read from next (in :meth:`on_assign`)."""
        consumer.seek(tp, offset)
        self._seeks += 1
        self._sought[tp] = (self._seeks, offset)

    def not_sought_since(self, records: list[Record], mark: int) -> list[Record]:
        """Drop the records of partitions sought after the batch was returned (seek number
        ``mark``), and seek them again: records fetched from the position before the seek,
        handled, could step over records the seek brings back (a gap never read). The consumer
        reads them again from the sought position."""
        kept: list[Record] = []
        dropped: set[tuple[str, int]] = set()
        for r in records:
            tp = (r.topic, r.partition)
            if self._sought.get(tp, (0, 0))[0] > mark:
                dropped.add(tp)
            else:
                kept.append(r)
        if dropped and self.consumer is not None:
            for tp in dropped:
                self.consumer.seek(tp, self._sought[tp][1])
            log.debug(
                "records polled while their partition was sought: read again",
                consumer=self.group,
                count=len(records) - len(kept),
            )
        return kept

    def still_assigned(self, records: list[Record]) -> list[Record]:
        """The records of partitions still assigned once the batch lock is held: a rebalance
        between the poll and the lock hands the others to another member, which reads them."""
        if self.consumer is None:
            return []
        assigned = self.consumer.assignment()
        if assigned.issuperset(partitions_of(records)):
            return records
        return [r for r in records if (r.topic, r.partition) in assigned]

    async def _handle(self, records: list[Record]) -> int:
        """Handle and commit one polled batch; the number of records handled."""
        raise NotImplementedError(f"{type(self).__name__} handles its batches in step()")

    async def poll(self, wait: float | None = None) -> list[Record]:
        """A batch: what arrives within ``wait`` (default :attr:`poll_timeout`), topped up for
        at most ``linger`` seconds while more keeps arriving, up to ``max_records``. Under load
        batches grow (fewer commits, fewer round trips); when quiet a record waits at most
        ~10 ms more."""
        assert self.consumer is not None, f"{self.name} is not started"
        timeout = self.poll_timeout if wait is None else wait
        records = await self.consumer.poll(self.max_records, timeout)
        # A seek during the poll (an assignment inside it) came before these records were
        # fetched; one from now on comes after: the records in hand are then stale.
        self.polled_at = self._seeks
        if not records:
            return records
        deadline = time.monotonic() + self.linger
        while len(records) < self.max_records:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            # What has arrived already, then (for a stream) a little more.
            wait = 0.0 if len(records) < 100 else min(left, 0.01)
            more = await self.consumer.poll(self.max_records - len(records), wait)
            if not more and len(records) < 100:
                break  # a trickle, not a stream: do not hold it back
            records.extend(more)
        return records

    def decode(self, record: Record, dlq: list[OutRecord]) -> AuditEvent | None:
        """The record's event, or ``None`` after queueing it for the dead-letter topic."""
        try:
            return decode(record.value)
        except DecodeError as exc:
            self.dead_letter(record, str(exc), dlq)
            return None

    def cannot_handle(self, record: Record, exc: Exception, dlq: list[OutRecord]) -> None:
        """Isolate a record whose handling raised: a retriable error (the store or the log is
        down) propagates, so the batch is handled again after a backoff; anything else would
        fail the same way every time, so the record goes to the dead-letter topic with the
        reason and the rest of its batch and partition proceed."""
        if getattr(exc, "retriable", False):
            raise exc
        log.error(
            "record cannot be handled",
            consumer=self.group,
            offset=record.offset,
            error=f"{type(exc).__name__}: {exc}"[:300],
        )
        reason = f"cannot be handled by {self.group}: {type(exc).__name__}: {exc}"
        self.dead_letter(record, reason[:2000], dlq, kind="failed")

    def dead_letter(
        self, record: Record, reason: str, dlq: list[OutRecord], *, kind: str = "invalid"
    ) -> None:
        """Queue ``record`` for the dead-letter topic; ``kind``: ``invalid`` (it could not be
        decoded), ``failed`` (handling it raised) or ``conflict`` (its ``event_id`` already
        names other content in its audit)."""
        self.dead_lettered += 1
        DEAD_LETTERED.labels(self.group, kind).inc()
        log.warning(
            "dead-lettered",
            consumer=self.group,
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            reason=reason,
        )
        dlq.append(dead_letter(self.log.topics, record, self.group, reason))

    async def commit(
        self, records: Sequence[Record], outputs: dict[tuple[str, int], list[OutRecord]]
    ) -> None:
        """Commit each input partition's offset with the outputs derived from it, all
        partitions concurrently (a transactional commit covers one input partition)."""
        assert self.consumer is not None
        consumer = self.consumer
        offsets = self.next_offsets(records)
        await asyncio.gather(
            *(consumer.commit({tp: nxt}, outputs.get(tp, ())) for tp, nxt in offsets.items())
        )

    next_offsets = staticmethod(next_offsets)

    async def lags(self) -> dict[tuple[str, int], int]:
        if self.consumer is None:
            return {}
        return await self.consumer.lags()

    async def idle(self) -> bool:
        """Every partition of our topics is assigned here and nothing is left to read."""
        if self.consumer is None:
            return True
        assigned = self.consumer.assignment()
        for topic in self.topic_names:
            for partition in await self.log.inspection.partitions(topic):
                if (topic, partition) not in assigned:
                    return False
        return await self.consumer.lag() == 0
