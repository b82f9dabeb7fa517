"""A log consumer that folds the audits of its partitions and sends something for some of their
events, committing each partition only up to the oldest event whose sending still waits.

Telemetry (one PostHog capture per reconciler failure) and the outcome feed (one entry per
status change, to each endpoint) are such consumers. Each folds the lifecycle topic itself (the
same pure ``evolve`` as everywhere, over events read as views: ``codec.read``) instead of
reading the projection at send time: the projector may lag behind or not run in this process,
and the row may already show later events; folding gives the state at the event itself.

**Assignment.** A partition is rebuilt from its latest checkpoint
(:mod:`consumers.components.checkpoints`) up to the group's committed offset, then read on from
there: what was waiting at a crash or a revocation is folded and sent again.

**Commits.** A partition's offset moves up to the oldest event still waiting (:meth:`waiting`),
so a restart sends it again; when nothing of the partition waits, its states are exactly as of
the committed offset, and a checkpoint of them is taken.

An event whose key ``(audit_id, event_id)`` was folded before is passed over, a duplicate or a
conflict alike, as the reconciler does (:mod:`consumers.components.keys`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Sequence

import structlog

from consumers.components.base import LogConsumer
from consumers.components.checkpoints import Checkpoints
from consumers.components.keys import Keys
from consumers.eventlog.codec import read
from consumers.eventlog.port import Consumer, EventLog, OutRecord, TopicPartition
from projections.store import ProjectionStore
from statemachine.errors import DecodeError
from statemachine.events import AuditEvent
from statemachine.state import AuditState

__all__ = ["Folding"]

log = structlog.get_logger("auditrec")


class Folding(LogConsumer):
    def __init__(
        self, event_log: EventLog, store: ProjectionStore, group: str | None = None
    ) -> None:
        super().__init__(event_log, [event_log.topics.lifecycle])
        if group is not None:
            self.group = group
        self.partitions: dict[TopicPartition, dict[str, AuditState]] = {}
        self.keys: dict[TopicPartition, Keys] = {}  # event ids of audits that can still change
        self._consumed: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self.checkpoints = Checkpoints(store.checkpoints, self.group)
        # Set by a step that failed midway: what was read may not all be sent, queued or
        # parked, so nothing more is committed (not even on a revocation) until a restart.
        self.broken = False

    @staticmethod
    @abstractmethod
    def fold(
        states: dict[str, AuditState], keys: Keys, event: AuditEvent
    ) -> tuple[AuditState, AuditState] | None:
        """The audit's state before and after ``event``, kept in ``states``; ``None`` when
        its key was folded before (passed over)."""

    @abstractmethod
    def waiting(self) -> Iterable[tuple[TopicPartition, int]]:
        """Where each event whose sending still waits was read."""

    def forget(self, partitions: set[TopicPartition]) -> None:
        """Drop what waits from ``partitions`` (revoked: their next owner sends it)."""

    async def stop(self) -> None:
        await super().stop()
        await self.checkpoints.flush()
        self.partitions.clear()
        self.keys.clear()
        self._consumed.clear()
        self._committed.clear()

    async def on_assign(self, consumer: Consumer, partitions: Sequence[TopicPartition]) -> None:
        committed = await consumer.committed()
        for tp in partitions:
            start = committed.get(tp, 0)
            restored = await self.checkpoints.load(tp, start)
            states = restored.states if restored is not None else {}
            keys = restored.keys if restored is not None else {}
            begin = restored.next_offset if restored is not None else 0
            if start > begin:
                async for batch in self.log.inspection.read(tp[0], tp[1], begin, start):
                    for record in batch:
                        try:
                            self.fold(states, keys, read(record.value))
                        except DecodeError:
                            continue
            self.partitions[tp] = states
            self.keys[tp] = keys
            self._consumed[tp] = self._committed[tp] = start
            self.seek(consumer, tp, start)
            log.debug(
                "partition assigned",
                consumer=self.group,
                partition=tp[1],
                committed=start,
                checkpoint=begin if restored is not None else None,
                followed=len(states),
            )
        log.info(
            "partitions assigned", consumer=self.group, partitions=sorted(p for _, p in partitions)
        )

    async def on_revoke(self, consumer: Consumer, partitions: Sequence[TopicPartition]) -> None:
        try:
            await self.commit_waiting([])
        except Exception as exc:  # the next owner re-reads from the last commit: no loss
            log.warning("commit on revoke failed", consumer=self.group, error=str(exc))
        gone = set(partitions)
        self.forget(gone)
        for tp in gone:
            self.partitions.pop(tp, None)
            self.keys.pop(tp, None)
            self._consumed.pop(tp, None)
            self._committed.pop(tp, None)

    def folded(self, tp: TopicPartition, event: AuditEvent) -> tuple[AuditState, AuditState] | None:
        """Fold ``event`` of partition ``tp``."""
        return self.fold(self.partitions.setdefault(tp, {}), self.keys.setdefault(tp, {}), event)

    async def commit_waiting(self, dlq: list[OutRecord]) -> None:
        """Move offsets up to the oldest event still waiting of each partition."""
        if self.consumer is None or self.broken:
            return
        offsets = dict(self._consumed)
        for tp, offset in self.waiting():
            offsets[tp] = min(offsets.get(tp, offset), offset)
        moved = {tp: o for tp, o in offsets.items() if self._committed.get(tp) != o}
        if not moved and not dlq:
            return
        await self.consumer.commit(offsets if moved else {}, dlq)
        for tp, offset in moved.items():
            before = self._committed.get(tp, offset)
            if offset == self._consumed.get(tp) and tp in self.partitions:
                # Nothing of the partition waits: its states are exactly as of the offset.
                self.checkpoints.progressed(
                    tp, offset - before, offset, self.partitions[tp], None, self.keys.get(tp)
                )
        self._committed.update(moved)
