"""The projector: folds lifecycle events into the ``audits`` table and its history.

Offsets live in the projection store, written in the same transaction as the rows; on
assignment the consumer seeks to them, so the table is exactly the fold of the log, whatever
crashed when. The group's offsets in the log are committed too, after the store, only so that
lag can be watched with the usual tools.

A record that is not a valid event, and an event the store refuses for a reason retrying will
not change, go to the dead-letter topic with the reason; the rest of the batch proceeds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import structlog

from consumers.components.base import LogConsumer
from consumers.eventlog.codec import read_verbatim
from consumers.eventlog.port import Consumer, EventLog, OutRecord, Record
from consumers.runtime.metrics import EVENTS_PROJECTED
from projections.store import ApplyResult, Position, ProjectionStore
from statemachine.errors import DecodeError
from statemachine.events import AuditEvent

__all__ = ["Projector"]

log = structlog.get_logger("auditrec.projector")


# Records decoded between two chances for the store's write of the previous part to proceed.
_YIELD_EVERY = 256


class Projector(LogConsumer):
    name = "projector"
    max_records = 10000
    part_size = 2500  # records a store transaction when a batch is large

    def __init__(self, event_log: EventLog, store: ProjectionStore) -> None:
        super().__init__(event_log, [event_log.topics.lifecycle])
        self.store = store
        self.applied = 0

    async def on_assign(self, consumer: Consumer, partitions: Sequence[tuple[str, int]]) -> None:
        stored = await self.store.stored_offsets(self.group)
        for tp in partitions:
            self.seek(consumer, tp, stored.get(tp, 0))

    async def _isolate(
        self,
        records: list[Record],
        batch: list[tuple[AuditEvent, Position]],
        bodies: list[bytes | None],
        offsets: dict[tuple[str, int], int],
        dlq: list[OutRecord],
        cause: Exception,
    ) -> ApplyResult:
        """A batch the store refused for a reason that retrying will not change: apply its
        events one by one, dead-letter those refused (with the reason), and move past them,
        so one event never holds back its batch, its partition or anyone after it."""
        log.warning("batch refused; applying its events one by one", error=str(cause)[:300])
        by_position = {(r.topic, r.partition, r.offset): r for r in records}
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
        await self.store.apply([], offsets, self.group)  # past the refused ones, too
        return ApplyResult(applied, skipped)

    async def _handle(self, records: list[Record]) -> int:
        """Decode and apply the batch in parts of :attr:`part_size` records, each part in its
        own store transaction with the offsets it reaches: while the store writes one part,
        the next is decoded (the decoding yields now and then so the write progresses), so
        neither side waits for the other. Parts are applied in order, one at a time."""
        assert self.consumer is not None
        dlq: list[OutRecord] = []
        applied = skipped = 0
        reached: dict[tuple[str, int], int] = {}  # the whole batch's next offsets
        writing: asyncio.Task[ApplyResult] | None = None
        try:
            for start in range(0, len(records), self.part_size):
                part = records[start : start + self.part_size]
                batch, bodies = await self._decode(part, dlq, busy=writing is not None)
                offsets = self.next_offsets(part)
                reached.update(offsets)
                if writing is not None:
                    result = await writing
                    applied, skipped = applied + result.applied, skipped + result.skipped
                writing = asyncio.create_task(self._apply(part, batch, bodies, offsets, dlq))
            if writing is not None:
                result = await writing
                applied, skipped = applied + result.applied, skipped + result.skipped
        finally:
            if writing is not None and not writing.done():  # only when decoding raised
                writing.cancel()
                await asyncio.gather(writing, return_exceptions=True)
        if dlq:
            await self.log.append(dlq)
        self.applied += applied
        EVENTS_PROJECTED.labels("applied").inc(applied)
        EVENTS_PROJECTED.labels("skipped").inc(skipped)
        try:
            await self.consumer.commit(reached)
        except Exception as exc:  # the store holds the truth; the log's copy is for lag only
            log.debug("log offset commit failed", error=str(exc))
        return len(records)

    async def _decode(
        self, records: list[Record], dlq: list[OutRecord], *, busy: bool
    ) -> tuple[list[tuple[AuditEvent, Position]], list[bytes | None]]:
        """The events of ``records`` and their JSON as read; while the store is ``busy``
        with the previous part, every few hundred records let it move on."""
        batch: list[tuple[AuditEvent, Position]] = []
        bodies: list[bytes | None] = []  # stored as the history's JSON when current
        for n, record in enumerate(records, 1):
            try:
                event, body = read_verbatim(record.value)
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
        dlq: list[OutRecord],
    ) -> ApplyResult:
        """One part in one store transaction, with the offsets past its records."""
        try:
            return await self.store.apply(batch, offsets, self.group, bodies)
        except Exception as exc:
            if getattr(exc, "retriable", False):
                raise  # the store is down: the whole batch again, after a backoff
            return await self._isolate(records, batch, bodies, offsets, dlq, exc)
