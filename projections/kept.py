"""The port of history set aside for a rebuild over a trimmed log: what the log no longer holds
is copied out of the history before the reset, and replayed from here before the log.

Users: the rebuild (``consumers/operations/rebuild.py``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping

from projections.values import Position

__all__ = ["KeptHistory"]


class KeptHistory(ABC):
    @abstractmethod
    async def keep_history(self, before: Mapping[tuple[str, int], int]) -> int:
        """Set aside the history recorded at positions before ``before`` (per topic and
        partition: what a trimmed log no longer holds), adding to what an interrupted rebuild
        set aside; returns how many events are set aside in all. It survives
        :meth:`~projections.writer.ProjectionWriter.reset`."""

    @abstractmethod
    async def kept_history(self, after: int, limit: int) -> list[tuple[int, bytes, Position]]:
        """Up to ``limit`` set-aside events in the order they were projected, after the
        ``after``-th: ``(number, JSON body, position)``."""

    @abstractmethod
    async def drop_kept_history(self) -> None:
        """Forget what was set aside (the rebuild that needed it is done)."""
