"""The coordination port: what processes sharing one store agree on — the watchdog's lock, the
processes' heartbeats (which components run where), periodic jobs claimed once per slot, and
the console's session generations (a logout ends a token's sessions on every replica).

Users: the watchdog (``consumers/components/watchdog.py``: its lock, and the claims of its
own tick and of retention's), and the backends (``consumers/operations/backends.py``:
heartbeats, the live components, a stopped process forgotten), the console's sign-in and
logout (``consumers/api/ui/session.py``: session generations).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime

__all__ = ["Coordination"]


class Coordination(ABC):
    @abstractmethod
    def watchdog_lock(self) -> AbstractAsyncContextManager[bool]:
        """Held by one watchdog tick at a time across processes; yields False when another
        holder has it (the tick is then skipped)."""

    @abstractmethod
    async def heartbeat(self, process: str, components: Sequence[str], now: datetime) -> None: ...

    @abstractmethod
    async def live_components(self, since: datetime) -> dict[str, list[str]]:
        """Components with a heartbeat after ``since`` → processes running them."""

    @abstractmethod
    async def forget_process(self, process: str) -> None: ...

    @abstractmethod
    async def claim_tick(self, name: str, slot: int, owner: str) -> bool:
        """Claim slot ``slot`` (an interval's number) of the periodic job ``name``: True for
        exactly one claimant across processes; later claims of the same slot get False."""

    @abstractmethod
    async def session_generation(self, name: str) -> int:
        """The console's session generation of token ``name``: 0 until its first logout. A
        session made in another generation is over."""

    @abstractmethod
    async def end_sessions(self, name: str, now: datetime) -> int:
        """End every console session of token ``name``, on every process: move its generation
        on (atomically, so concurrent logouts each move it); returns the new generation."""
