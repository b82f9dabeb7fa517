"""The reconciler's commits: each input partition's offset with the decisions derived from it,
in one transaction, started as the batch is handled and awaited while the next one is.

A partition's commits are made one at a time and in order, and one after a failed one is never
made (:class:`~consumers.components.partition_writes.BatchWrites`). A checkpoint due with a
batch is a snapshot of the states as that batch left them, exactly as of the offsets its commit
stores, and is saved only once that commit succeeded.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import structlog

from consumers.components.batches import counts_by_partition, next_offsets
from consumers.components.checkpoints import Checkpoints, Snapshot
from consumers.components.keys import Keys
from consumers.components.partition_writes import BatchWrites
from consumers.components.reconciler.log import Holds
from consumers.eventlog.port import Consumer, OutRecord, Record
from statemachine.state import AuditState

__all__ = ["Commits"]

log = structlog.get_logger("auditrec.reconciler")


class Commits:
    def __init__(self, checkpoints: Checkpoints | None) -> None:
        self.checkpoints = checkpoints
        self._writes = BatchWrites()

    def __len__(self) -> int:
        """The batches whose commits are not awaited yet."""
        return len(self._writes)

    def start(
        self,
        consumer: Consumer,
        records: list[Record],
        outputs: Mapping[tuple[str, int], list[OutRecord]],
        states: Mapping[tuple[str, int], dict[str, AuditState]],
        holds: Mapping[tuple[str, int], Holds],
        keys: Mapping[tuple[str, int], Keys] | None = None,
    ) -> None:
        """Start committing each input partition of ``records`` with its ``outputs``, after
        the commits of earlier batches over that partition; a checkpoint due is taken of
        ``states``, ``holds`` and ``keys`` as they are now."""
        checkpoints = self.checkpoints
        counts = counts_by_partition(records)
        commits = []
        for tp, nxt in next_offsets(records).items():
            snapshot = None
            if checkpoints is not None:
                snapshot = checkpoints.taken(
                    tp, counts[tp], states[tp], holds.get(tp), (keys or {}).get(tp)
                )
            commit = functools.partial(
                self._commit, consumer, tp, nxt, outputs.get(tp, []), snapshot
            )
            commits.append(([tp], commit))
        self._writes.start(commits)

    async def _commit(
        self,
        consumer: Consumer,
        tp: tuple[str, int],
        nxt: int,
        outputs: list[OutRecord],
        snapshot: Snapshot | None,
    ) -> None:
        """Commit ``tp`` up to ``nxt`` with ``outputs``; then save its checkpoint, if taken."""
        await consumer.commit({tp: nxt}, outputs)
        if snapshot is not None and self.checkpoints is not None:
            self.checkpoints.save(tp, nxt, snapshot)

    async def flush(self, keep: int = 0) -> None:
        """Wait until the commits of at most ``keep`` batches are not awaited yet; a failed
        one raises (the states are then ahead of the committed offsets)."""
        await self._writes.flush(keep)

    async def settle(self) -> bool:
        """Wait for every commit under way; whether all of them were made."""
        try:
            await self._writes.flush()
        except Exception as exc:
            log.warning("commit failed; states rebuilt from the log", error=str(exc)[:300])
            return False
        finally:
            await self._writes.end()
        return True
