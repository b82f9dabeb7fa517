"""The probe budget's port: the Workflows API's requests per sliding window and its 429
pauses, shared by every process probing one account.

Each request is recorded with its spender (``on_demand``, ``watchdog``, ...). A spender may be
held to a share of the window (``share``: at most that many of the window's requests are its
own), and part of each window may be reserved for one spender (``reserve`` requests kept for
``reserved_for``, the watchdog: the others together take at most ``budget - reserve``); both
are checked in the same atomic step that takes the slot, so they hold across processes.

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
        self,
        account: str,
        now: datetime,
        budget: int,
        window_s: float,
        *,
        spender: str = "other",
        share: int | None = None,
        reserve: int = 0,
        reserved_for: str = "watchdog",
    ) -> RequestSlot:
        """Take one of ``budget`` requests per sliding ``window_s`` seconds for ``account`` on
        behalf of ``spender``, unless ``account`` is paused at ``now``, or ``share`` is given
        and ``spender`` already holds that many of the window's requests (then the answer says
        ``share_spent`` and when its oldest leaves the window), or ``spender`` is not
        ``reserved_for`` and the spenders other than ``reserved_for`` already hold
        ``budget - reserve`` of the window's requests (then it says ``reserved`` and when
        their oldest leaves the window)."""

    @abstractmethod
    async def pause_requests(self, account: str, until: datetime) -> None:
        """Pause every request of ``account`` until ``until`` (a later pause wins)."""

    @abstractmethod
    async def requests_paused_until(self, account: str, now: datetime) -> datetime | None: ...

    @abstractmethod
    async def requests_in_window(
        self, account: str, now: datetime, window_s: float, *, spender: str | None = None
    ) -> int:
        """The window's requests of ``account`` (only ``spender``'s when given)."""
