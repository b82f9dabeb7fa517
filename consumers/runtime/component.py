"""What the supervisor runs: a :class:`Component` is started, stepped and stopped.

``step()`` does one unit of work (poll a batch, handle it, commit; one watchdog tick; serve
HTTP until told to stop) and returns how many records it handled. The supervisor calls it in
a loop, restarts the component after a failing step, and in burst mode (``serve
--until-idle``) steps the components that ``drains`` until they are ``idle()``, then calls each
``burst()`` once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from statemachine.longlived import LongLived

__all__ = ["Component"]


class Component(LongLived, ABC):
    name: str
    # The consumer group it reads with (consumer lag is reported per group), if any.
    group: str | None = None
    # Stepped by a drain in burst mode (log consumers).
    drains = False
    poll_timeout = 0.5

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    @abstractmethod
    async def step(self) -> int: ...

    def interrupt(self) -> None:
        """Ask a ``step()`` that runs until stopped (a server) to return soon."""

    async def burst(self) -> None:
        """The work burst mode does once after the first drain (the watchdog ticks)."""

    async def settle(self) -> int:
        """Work burst mode does after each later drain, until there is none (the watchdog
        judges the sweeps it made); returns how much it did."""
        return 0

    async def lag(self) -> int:
        return sum((await self.lags()).values())

    async def lags(self) -> dict[tuple[str, int], int]:
        """Per assigned partition, the records not consumed yet (none for a component that
        consumes no log)."""
        return {}

    async def idle(self) -> bool:
        return True
