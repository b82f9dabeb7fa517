"""Retention of the lifecycle log: auditrec trims it itself, and never past what a restart,
a replay or a rebuild still needs from it.

With ``AUDITREC_KAFKA_LIFECYCLE_RETENTION`` set, a partition's records older than the retention
are deleted once every consumer that folds the log has moved past them:

- the projector: its offsets, stored with the table; every event below them is in
  ``audit_events``, so ``replay`` still explains any audit and ``rebuild`` can start from there;
- the reconciler and telemetry: their latest checkpoints, since a restart loads one and folds
  only what follows; a partition without one keeps all of it. The reconciler always holds
  retention back, even before it first runs; telemetry only once it has run (without a PostHog
  key it never does, and a telemetry started later begins where the log then begins).

The topic itself keeps everything (``retention.ms=-1``): Kafka never deletes on its own what a
checkpoint does not cover, however long a reconciler stays down. The watchdog trims, once per
:data:`EVERY` (or a quarter of the retention, when shorter) across all processes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import structlog

from consumers.eventlog.port import EventLog
from projections.store import ProjectionStore

__all__ = ["EVERY", "Retention"]

EVERY = timedelta(hours=1)
log = structlog.get_logger("auditrec.retention")


class Retention:
    def __init__(
        self,
        event_log: EventLog,
        store: ProjectionStore,
        keep: timedelta,
        *,
        projector: str,
        checkpointing: Sequence[str],
        once_run: Sequence[str] = (),
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.log = event_log
        self.store = store
        self.keep = keep
        self.projector = projector
        self.checkpointing = list(checkpointing)
        self.once_run = list(once_run)
        self.clock = clock

    @property
    def every(self) -> timedelta:
        return min(EVERY, self.keep / 4)

    async def trim(self) -> dict[int, int]:
        """Trim each partition of the lifecycle topic as far as is safe; returns the offsets
        trimmed before, for the partitions trimmed."""
        topic = self.log.topics.lifecycle
        cutoff = self.clock() - self.keep
        floor = await self.log.inspection.offsets_at(topic, int(cutoff.timestamp() * 1000))
        projected = await self.store.writer.stored_offsets(self.projector)
        bounds = [floor, {p: o for (t, p), o in projected.items() if t == topic}]
        for group in self.checkpointing:  # a partition without a checkpoint: nothing trimmed
            bounds.append(await self.store.checkpoints.checkpoint_offsets(group, topic))
        for group in self.once_run:
            saved = await self.store.checkpoints.checkpoint_offsets(group, topic)
            if saved or await self.log.inspection.group_offsets(group, topic):
                bounds.append(saved)
        starts = await self.log.inspection.start_offsets(topic)
        before = {p: min(b.get(p, 0) for b in bounds) for p in floor}
        trims = {p: o for p, o in before.items() if o > starts.get(p, 0)}
        if trims:
            await self.log.retention.trim(topic, trims)
            log.info(
                "lifecycle log trimmed",
                older_than=cutoff.isoformat(),
                partitions=len(trims),
                records=sum(o - starts.get(p, 0) for p, o in trims.items()),
            )
        return trims
