"""One check's verdict, and running a check within a time limit so ``auditrec doctor`` never
hangs on a service that does not answer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["CHECK_TIMEOUT", "Check", "bounded"]

CHECK_TIMEOUT = 5.0  # seconds a check may take


@dataclass(frozen=True, slots=True)
class Check:
    """``detail`` says what was found (or what is wrong); ``fix`` what to do, when not ok;
    ``refused``: a configuration ``serve`` refuses to start with (exit 2), as opposed to a
    service that does not answer as it should (exit 1)."""

    name: str
    ok: bool
    detail: str
    fix: str | None = None
    refused: bool = False

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


async def bounded(
    name: str, check: Callable[[], Awaitable[Check]], fix: str, timeout: float = CHECK_TIMEOUT
) -> Check:
    """``check()``, or a failed :class:`Check` with ``fix`` when it takes over ``timeout``
    seconds."""
    try:
        async with asyncio.timeout(timeout):
            return await check()
    except TimeoutError:
        return Check(name, False, f"no answer within {timeout:g}s", fix)
