"""The projector: folds lifecycle events into the ``audits`` table and its history.

Offsets live in the projection store, written in the same transaction as the rows; on
assignment the consumer seeks to them, so the table is exactly the fold of the log, whatever
crashed when. The group's offsets in the log are committed too, after the store, only so that
lag can be watched with the usual tools.

A record that is not a valid event, and an event the store refuses for a reason retrying will
not change, go to the dead-letter topic with the reason; the rest of the batch proceeds.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from consumers.components.base import LogConsumer
from consumers.eventlog.codec import decode_verbatim
from consumers.eventlog.port import Consumer, EventLog, OutRecord, Record
from consumers.runtime.metrics import EVENTS_PROJECTED
from projections.store import ApplyResult, Position, ProjectionStore
from statemachine.errors import DecodeError
from statemachine.events import AuditEvent

__all__ = ["Projector"]

log = structlog.get_logger("auditrec.projector")


class Projector(LogConsumer):
    name = "projector"
    max_records = 10000

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
        assert self.consumer is not None
        dlq: list[OutRecord] = []
        batch: list[tuple[AuditEvent, Position]] = []
        bodies: list[bytes | None] = []  # stored as the history's JSON when current
        for record in records:
            try:
                event, body = decode_verbatim(record.value)
            except DecodeError as exc:
                self.dead_letter(record, str(exc), dlq)
                continue
            batch.append((event, (record.topic, record.partition, record.offset)))
            bodies.append(body)
        offsets = self.next_offsets(records)
        try:
            result = await self.store.apply(batch, offsets, self.group, bodies)
        except Exception as exc:
            if getattr(exc, "retriable", False):
                raise  # the store is down: the whole batch again, after a backoff
            result = await self._isolate(records, batch, bodies, offsets, dlq, exc)
        if dlq:
            await self.log.append(dlq)
        self.applied += result.applied
        EVENTS_PROJECTED.labels("applied").inc(result.applied)
        EVENTS_PROJECTED.labels("skipped").inc(result.skipped)
        try:
            await self.consumer.commit(offsets)
        except Exception as exc:  # the store holds the truth; the log's copy is for lag only
            log.debug("log offset commit failed", error=str(exc))
        return len(records)
