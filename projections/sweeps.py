"""The sweeps port: watchdog sweeps whose decisions await the mass-failure brake's verdict, and
the lease under which one process judges each.

Users: the mass-failure brake (``consumers/components/brake.py``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime

from projections.values import OpenSweep

__all__ = ["Sweeps"]


class Sweeps(ABC):
    @abstractmethod
    async def open_sweep(
        self, sweep_id: str, requests: Sequence[str], at: datetime, deadline: datetime
    ) -> None:
        """Record a sweep whose decisions await a verdict (idempotent by ``sweep_id``)."""

    @abstractmethod
    async def open_sweeps(self) -> list[OpenSweep]:
        """Sweeps without a verdict, oldest first."""

    @abstractmethod
    async def claim_sweep(self, sweep_id: str, owner: str, now: datetime, lease_s: float) -> bool:
        """Claim the judging of an open sweep for ``lease_s`` seconds: True for one claimant
        at a time; a claim whose lease ran out (its holder died) can be taken over."""

    @abstractmethod
    async def close_sweep(
        self, sweep_id: str, verdict: str, lost: int, observations: int, now: datetime
    ) -> None:
        """Record the verdict (``released`` or ``held``); the sweep is no longer open."""
