"""The checkpoints port: the state of a stateful consumer (the reconciler) per partition,
folded up to an offset, so a restart resumes from it instead of the start of the log.

Users: the checkpointing of components (``consumers/components/checkpoints.py``, the
reconciler) and retention (which trims no further than the checkpoints).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

__all__ = ["CheckpointStore"]


class CheckpointStore(ABC):
    @abstractmethod
    async def save_checkpoint(
        self, consumer: str, topic: str, partition: int, next_offset: int, state: bytes
    ) -> None:
        """Keep ``state``, the consumer's state of one partition folded up to (not including)
        ``next_offset``, replacing the one kept before."""

    @abstractmethod
    async def load_checkpoint(
        self, consumer: str, topic: str, partition: int
    ) -> tuple[int, bytes] | None:
        """The last checkpoint kept for the partition: ``(next_offset, state)``."""

    @abstractmethod
    async def checkpoint_offsets(self, consumer: str, topic: str) -> dict[int, int]:
        """The ``next_offset`` of each partition's checkpoint (what retention may trim)."""
