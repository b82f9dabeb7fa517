"""The event log's retention port: deleting the records a log no longer needs to hold.

Its one user is lifecycle retention (:mod:`consumers.components.retention`), which trims only
below the offsets every consumer's checkpoint has passed; what a partition still holds is read
with the inspection port (:meth:`~consumers.eventlog.inspection.LogInspection.start_offsets`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping

__all__ = ["LogRetention"]


class LogRetention(ABC):
    @abstractmethod
    async def trim(self, topic: str, before: Mapping[int, int]) -> None:
        """Delete the records of each partition before the offset given (the last record of
        a partition is always kept, so no offset is ever handed out twice)."""
