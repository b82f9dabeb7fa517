"""The projector: folds lifecycle events into the ``audits`` table and its history.

Offsets live in the projection store, written in the same transaction as the rows; on
assignment the consumer seeks to them, so the table is exactly the fold of the log, whatever
crashed when. The group's offsets in the log are committed too, after the store, only so that
lag can be watched with the usual tools.

A part of a batch is written in up to two transactions at once, each over log partitions of
its own and storing only their offsets (an audit lives in one partition): each commits or fails
alone, and a failed one is read again from its own offsets.

Under load the store writes one batch's last part while the next batch is polled and decoded;
that write is awaited before the next part is written, before partitions change hands, before
the consumer stops, and as soon as a poll finds nothing at hand.

A record that is not a valid event, and an event the store refuses for a reason retrying will
not change, go to the dead-letter topic with the reason; the rest of the batch proceeds. Dead
letters are appended before the store's offsets move past them: a failure in between sets them
aside twice, never not at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

import structlog

from consumers.components.base import LogConsumer
from consumers.eventlog.codec import decode_verbatim
from consumers.eventlog.port import Consumer, EventLog, OutRecord, Record
from consumers.eventlog.wire import decode_view
from consumers.runtime.metrics import EVENTS_PROJECTED
from projections.store import ProjectionStore
from projections.values import ApplyResult, Position
from statemachine.errors import DecodeError
from statemachine.events import AuditEvent

__all__ = ["Projector", "split_lanes"]

log = structlog.get_logger("auditrec.projector")


# Records decoded between two chances for the store's write of the previous part to proceed.
_YIELD_EVERY = 256


# Events of some partitions, their JSON as read, and those partitions' next offsets.
_Lane = tuple[list[tuple[AuditEvent, Position]], list[bytes | None], dict[tuple[str, int], int]]


@dataclass(slots=True)
class _Batch:
    """What a batch leaves to do once its last part is written."""

    reached: dict[tuple[str, int], int] = field(default_factory=dict)  # next offsets
    applied: int = 0
    skipped: int = 0


class Projector(LogConsumer):
    name = "projector"
    # Large batches coalesce an audit's events into one row write; two lanes keep two server
    # processes busy (bench/pipeline.py, 200,000 events, side by side: 24.5k/s with 10,000 in
    # parts of 2,500; 30.0k/s with 20,000 in parts of 10,000; 30.7k/s in one part of 20,000;
    # with two lanes, 32.1k → 33.2k/s and 29.1k → 30.9k/s in two runs).
    max_records = 20000
    part_size = 10000  # records a part when a batch is large
    lanes = 2  # store transactions writing one part at once, each over its own partitions

    def __init__(self, event_log: EventLog, store: ProjectionStore) -> None:
        super().__init__(event_log, [event_log.topics.lifecycle])
        self.store = store
        self.applied = 0
        # The part being written, and its batch when it is the batch's last part.
        self._writing: tuple[asyncio.Task[None], _Batch | None] | None = None

    async def stop(self) -> None:
        async with self.batch_lock:
            await self._settle()
        await super().stop()

    async def on_revoke(self, consumer: Consumer, partitions: Sequence[tuple[str, int]]) -> None:
        await self._settle()

    async def on_assign(self, consumer: Consumer, partitions: Sequence[tuple[str, int]]) -> None:
        await self._settle()  # its offsets are stored before they are read
        stored = await self.store.stored_offsets(self.group)
        for tp in partitions:
            self.seek(consumer, tp, stored.get(tp, 0))

    async def _isolate(
        self,
        records: list[Record],
        batch: list[tuple[AuditEvent, Position]],
        bodies: list[bytes | None],
        offsets: dict[tuple[str, int], int],
        cause: Exception,
    ) -> ApplyResult:
        """A batch the store refused for a reason that retrying will not change: apply its
        events one by one, dead-letter those refused (with the reason), and move past them,
        so one event never holds back its batch, its partition or anyone after it. The dead
        letters are appended before the offsets move past them (after a failure in between
        they are set aside again: twice, never lost)."""
        log.warning("batch refused; applying its events one by one", error=str(cause)[:300])
        by_position = {(r.topic, r.partition, r.offset): r for r in records}
        dlq: list[OutRecord] = []
        applied = skipped = 0
        for (event, position), body in zip(batch, bodies, strict=True):
            topic, partition, offset = position
            try:
                one = await self.store.apply(
                    [(event, position)], {(topic, partition): offset + 1}, self.group, [body]
                )
            except Exception as exc:
                if getattr(exc, "retriable", False):
                    raise
                reason = f"cannot be applied to the projection: {type(exc).__name__}: {exc}"
                self.dead_letter(by_position[position], reason[:2000], dlq)
                continue
            applied += one.applied
            skipped += one.skipped
        if dlq:
            await self.log.append(dlq)
        await self.store.apply([], offsets, self.group)  # past the refused ones, too
        return ApplyResult(applied, skipped)

    async def step(self) -> int:
        """While a batch's last part is written, the next batch, if one is already at hand,
        is polled and decoded; when none is, the write is awaited before waiting for more."""
        if self._writing is None:
            return await super().step()
        handled = await self.step_within(0.0)
        if not handled:
            async with self.batch_lock:
                await self._flush()
        return handled

    async def _handle(self, records: list[Record]) -> int:
        """Decode and apply the batch in parts of :attr:`part_size` records, each part in its
        own store transaction with the offsets it reaches: while the store writes one part,
        the next is decoded (the decoding yields now and then so the write progresses), so
        neither side waits for the other. Parts are applied in order, one at a time; the last
        one is still being written when this returns (see :meth:`_flush`)."""
        assert self.consumer is not None
        batch = _Batch()
        try:
            for start in range(0, len(records), self.part_size):
                part = records[start : start + self.part_size]
                dlq: list[OutRecord] = []
                events, bodies = await self._decode(part, dlq, busy=self._writing is not None)
                if dlq:  # set aside before the store moves past them: never lost
                    await self.log.append(dlq)
                offsets = self.next_offsets(part)
                batch.reached.update(offsets)
                await self._flush()  # the previous part, of this batch or the one before
                last = start + self.part_size >= len(records)
                write = self._apply(part, events, bodies, offsets, batch)
                self._writing = (asyncio.create_task(write), batch if last else None)
        except BaseException:
            await self._abandon()
            raise
        return len(records)

    async def _flush(self) -> None:
        """Wait for the part being written; after a batch's last part, finish the batch: its
        counts, and its offsets committed to the log as well (for lag only).

        A store error propagates (the component restarts from the offsets in the store).
        Called under :attr:`batch_lock`, so never twice at once."""
        if self._writing is None:
            return
        task, finished = self._writing
        try:
            await asyncio.shield(task)  # cancelling a flush leaves the write to stop() or
        finally:  # the next flush
            if task.done():
                self._writing = None
        if finished is None:
            return
        self.applied += finished.applied
        EVENTS_PROJECTED.labels("applied").inc(finished.applied)
        EVENTS_PROJECTED.labels("skipped").inc(finished.skipped)
        assert self.consumer is not None
        try:
            await self.consumer.commit(finished.reached)
        except Exception as exc:  # the store holds the truth; the log's copy is for lag only
            log.debug("log offset commit failed", error=str(exc))

    async def _settle(self) -> None:
        """Flush before partitions change hands or the consumer stops; a failed write is
        only logged: its records are read again from the offsets in the store."""
        try:
            await self._flush()
        except Exception as exc:
            log.warning(
                "projection write failed; read again from the store's offsets", error=str(exc)[:300]
            )

    async def _abandon(self) -> None:
        """Cancel the part being written (handling the batch raised)."""
        if self._writing is not None:
            task, self._writing = self._writing[0], None
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _decode(
        self, records: list[Record], dlq: list[OutRecord], *, busy: bool
    ) -> tuple[list[tuple[AuditEvent, Position]], list[bytes | None]]:
        """The events of ``records`` and their JSON as read; while the store is ``busy``
        with the previous part, every few hundred records let it move on."""
        batch: list[tuple[AuditEvent, Position]] = []
        bodies: list[bytes | None] = []  # stored as the history's JSON when current
        for n, record in enumerate(records, 1):
            value = record.value
            event: AuditEvent | None = decode_view(value)  # read_verbatim, inline
            body: bytes | None = value
            if event is None:  # not a view: pydantic's path decides
                try:
                    event, body = decode_verbatim(value)
                except DecodeError as exc:
                    self.dead_letter(record, str(exc), dlq)
                    continue
            batch.append((event, record[:3]))  # topic, partition, offset
            bodies.append(body)
            if busy and not n % _YIELD_EVERY:
                await asyncio.sleep(0)
        return batch, bodies

    async def _apply(
        self,
        records: list[Record],
        batch: list[tuple[AuditEvent, Position]],
        bodies: list[bytes | None],
        offsets: dict[tuple[str, int], int],
        tally: _Batch,
    ) -> None:
        """One part in up to :attr:`lanes` store transactions at once, each over its own log
        partitions with their offsets (an audit lives in one partition, so they share no
        row, and each commits or fails alone); a failure is raised once all have ended."""
        lanes = split_lanes(batch, offsets, self.lanes)
        if len(lanes) == 1:
            await self._apply_lane(records, (batch, bodies, offsets), tally)
            return
        ended = await asyncio.gather(
            *(
                self._apply_lane(
                    records, ([batch[i] for i in rows], [bodies[i] for i in rows], lane), tally
                )
                for rows, lane in lanes
            ),
            return_exceptions=True,
        )
        for outcome in ended:
            if isinstance(outcome, BaseException):
                raise outcome

    async def _apply_lane(self, records: list[Record], lane: _Lane, tally: _Batch) -> None:
        """A lane's events (of some partitions), their bodies and their partitions' next
        offsets, in one store transaction."""
        batch, bodies, offsets = lane
        try:
            result = await self.store.apply(batch, offsets, self.group, bodies)
        except Exception as exc:
            if getattr(exc, "retriable", False):
                raise  # the store is down: the whole batch again, after a backoff
            result = await self._isolate(records, batch, bodies, offsets, exc)
        tally.applied += result.applied
        tally.skipped += result.skipped


def split_lanes(
    batch: list[tuple[AuditEvent, Position]], offsets: dict[tuple[str, int], int], n: int
) -> list[tuple[list[int], dict[tuple[str, int], int]]]:
    """``batch`` split by log partition into at most ``n`` lanes of about equal size: each
    lane's event indexes (in order) and the next offsets of its partitions."""
    rows: dict[tuple[str, int], list[int]] = {tp: [] for tp in offsets}
    for i, (_, position) in enumerate(batch):
        rows[position[:2]].append(i)
    if n <= 1 or len(rows) <= 1:
        return [(list(range(len(batch))), offsets)]
    lanes: list[tuple[list[int], dict[tuple[str, int], int]]] = [([], {}) for _ in range(n)]
    for tp in sorted(rows, key=lambda tp: len(rows[tp]), reverse=True):
        indexes, lane_offsets = min(lanes, key=lambda lane: len(lane[0]))
        indexes.extend(rows[tp])
        lane_offsets[tp] = offsets[tp]
    for indexes, _ in lanes:
        indexes.sort()
    return [lane for lane in lanes if lane[1]]
