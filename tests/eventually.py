"""The one way tests wait for a condition: :func:`eventually` (async) and :func:`eventually_sync`.

``check`` is called (and awaited when it returns an awaitable) until ``until(value)`` holds —
by default, until the value is truthy — and that value is returned. An ``AssertionError``
raised by ``check`` or ``until`` means "not yet"; any other exception ends the wait at once.
When ``timeout`` passes first, an ``AssertionError`` says what was awaited, for how long, and
the last value (or assertion) seen::

    row = await eventually(lambda: store.audits.get("a-1"), message="a-1 is projected")
    got = await eventually(lambda: read_all(log, topic), until=lambda rs: len(rs) >= 3)
    eventually_sync(lambda: capture.delivered(), until=lambda es: len(es) == 2, timeout=15)

A check may do work each round (poll a consumer, step a component); pass ``interval=0`` when
the check itself waits.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

__all__ = ["eventually", "eventually_sync"]

T = TypeVar("T")

TIMEOUT = 10.0
INTERVAL = 0.02
_NOTHING: Any = object()


def _truthy(value: object) -> bool:
    return bool(value)


def _describe(check: Callable[..., object], message: str | None) -> str:
    if message:
        return message
    name = getattr(check, "__name__", None) or repr(check)
    return f"{name}() to hold"


def _shown(last: object) -> str:
    if last is _NOTHING:
        return "nothing (the check never returned)"
    text = f"{type(last).__name__}: {last}" if isinstance(last, AssertionError) else repr(last)
    return text if len(text) <= 2000 else text[:2000] + "…"


def _timed_out(
    check: Callable[..., object], message: str | None, timeout: float, tries: int, last: object
) -> AssertionError:
    return AssertionError(
        f"waited {timeout:g}s ({tries} tries) for {_describe(check, message)}; "
        f"last seen: {_shown(last)}"
    )


@overload
async def eventually(
    check: Callable[[], Awaitable[T]],
    *,
    until: Callable[[T], object] = ...,
    timeout: float = ...,
    interval: float = ...,
    message: str | None = ...,
) -> T: ...


@overload
async def eventually(
    check: Callable[[], T],
    *,
    until: Callable[[T], object] = ...,
    timeout: float = ...,
    interval: float = ...,
    message: str | None = ...,
) -> T: ...


async def eventually(
    check: Callable[[], Any],
    *,
    until: Callable[[Any], object] = _truthy,
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
    message: str | None = None,
) -> Any:
    """Await ``check()`` until ``until`` holds for its value; that value is returned."""
    deadline = time.monotonic() + timeout
    last: object = _NOTHING
    tries = 0
    while True:
        tries += 1
        try:
            value = check()
            if inspect.isawaitable(value):
                value = await value
            last = value
            if until(value):
                return value
        except AssertionError as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise _timed_out(check, message, timeout, tries, last)
        await asyncio.sleep(interval)


def eventually_sync(
    check: Callable[[], T],
    *,
    until: Callable[[T], object] = _truthy,
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
    message: str | None = None,
) -> T:
    """:func:`eventually` for code without an event loop (threads, subprocesses, HTTP)."""
    deadline = time.monotonic() + timeout
    last: object = _NOTHING
    tries = 0
    while True:
        tries += 1
        try:
            value = check()
            if inspect.isawaitable(value):
                if inspect.iscoroutine(value):
                    value.close()
                raise TypeError("eventually_sync() got an awaitable: use eventually()")
            last = value
            if until(value):
                return value
        except AssertionError as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise _timed_out(check, message, timeout, tries, last)
        time.sleep(interval)
