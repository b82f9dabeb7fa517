"""The probe budget's port: the Workflows API's requests per sliding window and its 429
pauses, shared by every process probing one account.

Users: the Workflows client's rate limit (``consumers/workflows/ratelimit.py``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime

from projections.values import RequestSlot

__all__ = ["RequestBudget"]


class RequestBudget(ABC):
    @abstractmethod
    async def take_request_slot(
        self, account: str, now: datetime, budget: int, window_s: float
    ) -> RequestSlot:
        """Take one of ``budget`` requests per sliding ``window_s`` seconds for ``account``,
        unless ``account`` is paused at ``now``."""

    @abstractmethod
    async def pause_requests(self, account: str, until: datetime) -> None:
        """Pause every request of ``account`` until ``until`` (a later pause wins)."""

    @abstractmethod
    async def requests_paused_until(self, account: str, now: datetime) -> datetime | None: ...

    @abstractmethod
    async def requests_in_window(self, account: str, now: datetime, window_s: float) -> int: ...
