"""The telemetry outbox's port: which events were already sent, so each is sent once.

Users: the telemetry outbox (``consumers/components/telemetry_outbox.py``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from datetime import datetime

__all__ = ["SentTelemetry"]


class SentTelemetry(ABC):
    @abstractmethod
    async def telemetry_sent(self, event_ids: Iterable[str]) -> set[str]:
        """Those of ``event_ids`` marked sent."""

    @abstractmethod
    async def mark_telemetry_sent(self, event_id: str, at: datetime) -> None:
        """Remember ``event_id`` as sent (idempotent); a rebuild does not forget it."""
