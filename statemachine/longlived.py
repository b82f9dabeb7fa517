"""``async with`` for every long-lived object: enter starts it, exit stops it.

Subclasses implement ``start()`` and ``stop()``, both idempotent.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ["LongLived"]


class LongLived:
    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
