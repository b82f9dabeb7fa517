"""The projector: folds lifecycle events into the ``audits`` table and its history.

Offsets live in the projection store, written in the same transaction as the rows; on
assignment the consumer seeks to them, so the table is exactly the fold of the log, whatever
crashed when. The group's offsets in the log are committed too, after the store, only so that
lag can be watched with the usual tools.

A part of a batch is written in up to two transactions (lanes), each over log partitions of
its own and storing only their offsets (an audit lives in one partition): each commits or fails
alone, and a failed one is read again from its own offsets.

Writes overlap: up to two parts are written at once, and a write waits only for the writes
before it over its own partitions, so a partition's records are stored in order and never by
two transactions at once, and a write whose predecessor failed is never made (the partition is
read again from the offsets in the store). Meanwhile the next batch is polled and decoded. The
writes are awaited before partitions change hands, before the consumer stops, and as soon as a
poll finds nothing at hand.

A record that is not a valid event, and an event the store refuses for a reason retrying will
not change, go to the dead-letter topic with the reason; the rest of the batch proceeds. So does
an event whose ``(audit_id, event_id)`` the history already holds with other content (reason
``event_id_conflict``: :mod:`statemachine.idempotency`); one that repeats that content is
skipped. Dead letters are appended before the store's offsets move past them: a failure in
between sets them aside twice, never not at all.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

import structlog

from consumers.components.base import LogConsumer
from consumers.components.partition_writes import BatchWrites
from consumers.eventlog.codec import decode_verbatim
from consumers.eventlog.port import Consumer, EventLog, OutRecord, Record
from consumers.eventlog.wire import decode_view
from consumers.runtime.metrics import EVENTS_PROJECTED
from projections.values import ApplyResult, Position
from projections.writer import ProjectionWriter
from statemachine.errors import DecodeError
from statemachine.events import AuditEvent

__all__ = ["Projector", "split_lanes"]

log = structlog.get_logger("auditrec.projector")


# Records decoded between two chances for the store's write of the previous part to proceed.
_YIELD_EVERY = 256


# Events of some partitions, their JSON as read, and those partitions' next offsets.
_Lane = tuple[list[tuple[AuditEvent, Position]], list[bytes | None], dict[tuple[str, int], int]]
# A partition's events in a part, and their JSON as read.
_Run = tuple[list[tuple[AuditEvent, Position]], list[bytes | None]]


@dataclass(slots=True)
class _Batch:
    """What a batch leaves to do once its last part is written."""

    reached: dict[tuple[str, int], int] = field(default_factory=dict)  # next offsets
    applied: int = 0
    skipped: int = 0
    conflicts: int = 0


class Projector(LogConsumer):
    name = "projector"
    # Large batches coalesce an audit's events into one row write (+22 % events/s against
    # 10,000 in parts of 2,500: bench/pipeline.py, projector).
    max_records = 20000
    part_size = 10000  # records a part when a batch is large
    # Store transactions writing one part at once, each over its own partitions, keeping two
    # server processes busy (+5 % events/s: bench/pipeline.py, projector).
    lanes = 2
    # Parts written at once: the next part's writes start as soon as the earlier writes over
    # their partitions end (+10 % events/s: bench/pipeline.py, projector).
    depth = 2

    def __init__(self, event_log: EventLog, writer: ProjectionWriter) -> None:
        super().__init__(event_log, [event_log.topics.lifecycle])
        self.writer = writer
        self.applied = 0
        self._parts = BatchWrites()  # the parts being written, in order

    async def stop(self) -> None:
        async with self.batch_lock:
            await self._settle()
        await super().stop()

    async def on_revoke(self, consumer: Consumer, partitions: Sequence[tuple[str, int]]) -> None:
        await self._settle()

    async def on_assign(self, consumer: Consumer, partitions: Sequence[tuple[str, int]]) -> None:
        await self._settle()  # its offsets are stored before they are read
        stored = await self.writer.stored_offsets(self.group)
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
        conflicts: tuple[tuple[int, str], ...] = ()
        for (event, position), body in zip(batch, bodies, strict=True):
            topic, partition, offset = position
            try:
                one = await self.writer.apply(
                    [(event, position)],
                    {(topic, partition): offset + 1},
                    self.group,
                    [body],
                    functools.partial(self._set_aside, records, [(event, position)]),
                )
            except Exception as exc:
                if getattr(exc, "retriable", False):
                    raise
                reason = f"cannot be applied to the projection: {type(exc).__name__}: {exc}"
                self.dead_letter(by_position[position], reason[:2000], dlq)
                continue
            applied += one.applied
            skipped += one.skipped
            conflicts += one.conflicts
        if dlq:
            await self.log.append(dlq)
        await self.writer.apply([], offsets, self.group)  # past the refused ones, too
        return ApplyResult(applied, skipped, conflicts)

    def writing(self) -> bool:
        return bool(self._parts)

    async def written(self) -> None:
        await self._parts.flush()

    async def _handle(self, records: list[Record]) -> int:
        """Decode and apply the batch in parts of :attr:`part_size` records, each part in its
        own store transactions with the offsets it reaches: while the store writes, the next
        part is decoded (the decoding yields now and then so the writes progress), so neither
        side waits for the other. A part's writes start once fewer than :attr:`depth` parts are
        being written; the last ones are still being written when this returns (see
        :meth:`written`)."""
        assert self.consumer is not None
        batch = _Batch()
        try:
            for start in range(0, len(records), self.part_size):
                part = records[start : start + self.part_size]
                dlq: list[OutRecord] = []
                runs = await self._decode(part, dlq, busy=bool(self._parts))
                if dlq:  # set aside before the store moves past them: never lost
                    await self.log.append(dlq)
                offsets = self.next_offsets(part)
                batch.reached.update(offsets)
                await self._parts.flush(keep=self.depth - 1)
                last = start + self.part_size >= len(records)
                then = functools.partial(self._finish, batch) if last else None
                self._parts.start(self._write(part, runs, offsets, batch), then)
        except BaseException:
            await self._parts.end(cancel=True)  # cancel the writes under way
            raise
        return len(records)

    async def _finish(self, batch: _Batch) -> None:
        """A batch written: its counts, and its offsets committed to the log as well (for lag
        only)."""
        self.applied += batch.applied
        EVENTS_PROJECTED.labels("applied").inc(batch.applied)
        EVENTS_PROJECTED.labels("skipped").inc(batch.skipped)
        EVENTS_PROJECTED.labels("conflict").inc(batch.conflicts)
        assert self.consumer is not None
        try:
            await self.consumer.commit(batch.reached)
        except Exception as exc:  # the store holds the truth; the log's copy is for lag only
            log.debug("log offset commit failed", error=str(exc))

    async def _settle(self) -> None:
        """Flush before partitions change hands or the consumer stops, and wait for every
        write to end; a failed write is only logged: its partitions are read again from the
        offsets in the store."""
        try:
            await self._parts.flush()
        except Exception as exc:
            log.warning(
                "projection write failed; read again from the store's offsets", error=str(exc)[:300]
            )
        await self._parts.end()

    async def _decode(
        self, records: list[Record], dlq: list[OutRecord], *, busy: bool
    ) -> dict[tuple[str, int], _Run]:
        """The events of ``records`` and their JSON as read, by partition; while the store is
        ``busy``, every few hundred records let it move on."""
        runs: dict[tuple[str, int], _Run] = {}
        topic, partition = None, None
        events: list[tuple[AuditEvent, Position]] = []
        bodies: list[bytes | None] = []  # stored as the history's JSON when current
        for n, record in enumerate(records, 1):
            if record.partition != partition or record.topic != topic:  # a partition's records
                topic, partition = record.topic, record.partition  # come in runs
                events, bodies = runs.setdefault((topic, partition), ([], []))
            value = record.value
            event: AuditEvent | None = decode_view(value)  # read_verbatim, inline
            body: bytes | None = value
            if event is None:  # not a view: pydantic's path decides
                try:
                    event, body = decode_verbatim(value)
                except DecodeError as exc:
                    self.dead_letter(record, str(exc), dlq)
                    continue
            events.append((event, record[:3]))  # topic, partition, offset
            bodies.append(body)
            if busy and not n % _YIELD_EVERY:
                await asyncio.sleep(0)
        return runs

    def _write(
        self,
        records: list[Record],
        runs: dict[tuple[str, int], _Run],
        offsets: dict[tuple[str, int], int],
        tally: _Batch,
    ) -> list[tuple[list[tuple[str, int]], Callable[[], Awaitable[None]]]]:
        """The writes of one part (each to start after the earlier writes over its partitions:
        :mod:`consumers.components.partition_writes`): up to :attr:`lanes` store transactions,
        each over its own log partitions with their offsets (an audit lives in one partition,
        so they share no row, and each commits or fails alone)."""
        sizes = {tp: len(runs[tp][0]) if tp in runs else 0 for tp in offsets}
        writes: list[tuple[list[tuple[str, int]], Callable[[], Awaitable[None]]]] = []
        for partitions in split_lanes(sizes, self.lanes):
            lane: _Lane = ([], [], {})
            for tp in partitions:
                if tp in runs:
                    lane[0].extend(runs[tp][0])
                    lane[1].extend(runs[tp][1])
                lane[2][tp] = offsets[tp]
            writes.append((partitions, functools.partial(self._apply_lane, records, lane, tally)))
        return writes

    async def _apply_lane(self, records: list[Record], lane: _Lane, tally: _Batch) -> None:
        """A lane's events (of some partitions), their bodies and their partitions' next
        offsets, in one store transaction."""
        batch, bodies, offsets = lane
        set_aside = functools.partial(self._set_aside, records, batch)
        try:
            result = await self.writer.apply(batch, offsets, self.group, bodies, set_aside)
        except Exception as exc:
            if getattr(exc, "retriable", False):
                raise  # the store is down: the whole batch again, after a backoff
            result = await self._isolate(records, batch, bodies, offsets, exc)
        tally.applied += result.applied
        tally.skipped += result.skipped
        tally.conflicts += len(result.conflicts)

    async def _set_aside(
        self,
        records: list[Record],
        batch: Sequence[tuple[AuditEvent, Position]],
        conflicts: Sequence[tuple[int, str]],
    ) -> None:
        """Dead-letter the events of ``batch`` the store refused as conflicts (index, reason),
        before the store's transaction commits."""
        by_position = {(r.topic, r.partition, r.offset): r for r in records}
        dlq: list[OutRecord] = []
        for i, reason in conflicts:
            self.dead_letter(by_position[batch[i][1]], reason, dlq, kind="conflict")
        await self.log.append(dlq)


def split_lanes(sizes: Mapping[tuple[str, int], int], n: int) -> list[list[tuple[str, int]]]:
    """The partitions of ``sizes`` (each with its number of events) split into at most ``n``
    lanes of about equal size, largest partitions first."""
    lanes: list[tuple[list[tuple[str, int]], list[int]]] = [([], [0]) for _ in range(max(n, 1))]
    for tp in sorted(sizes, key=sizes.__getitem__, reverse=True):
        partitions, size = min(lanes, key=lambda lane: lane[1][0])
        partitions.append(tp)
        size[0] += sizes[tp]
    return [partitions for partitions, _ in lanes if partitions]
