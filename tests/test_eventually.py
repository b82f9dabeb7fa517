"""The suite's one waiting helper: what it returns, when it keeps trying, and what it says."""

from __future__ import annotations

import itertools

import pytest

from tests.eventually import eventually, eventually_sync


async def test_the_first_value_that_holds_is_returned() -> None:
    # given a check whose value grows each call
    counter = itertools.count()

    # when waiting until it reaches 3
    value = await eventually(lambda: next(counter), until=lambda n: n >= 3, interval=0)

    # then exactly that value comes back
    assert value == 3


async def test_a_coroutine_check_is_awaited_and_a_falsy_value_means_not_yet() -> None:
    answers = iter([None, [], {"row": 1}])

    async def fetch() -> object:
        return next(answers)

    assert await eventually(fetch, interval=0) == {"row": 1}


async def test_an_assertion_error_means_not_yet() -> None:
    calls = itertools.count(1)

    def check() -> str:
        n = next(calls)
        assert n >= 2, f"only {n} call"
        return "ready"

    assert await eventually(check, interval=0) == "ready"


async def test_a_timeout_says_what_was_awaited_and_the_last_value_seen() -> None:
    with pytest.raises(AssertionError) as err:
        await eventually(
            lambda: [1, 2], until=lambda v: len(v) > 5, timeout=0.05, message="six items"
        )
    text = str(err.value)
    assert text.startswith("waited 0.05s (")
    assert "for six items; last seen: [1, 2]" in text


async def test_a_timeout_after_assertions_shows_the_last_assertion() -> None:
    def check() -> bool:
        raise AssertionError("row missing")

    with pytest.raises(AssertionError, match=r"last seen: AssertionError: row missing"):
        await eventually(check, timeout=0.05)


async def test_other_exceptions_end_the_wait_at_once() -> None:
    calls: list[int] = []

    def check() -> bool:
        calls.append(1)
        raise KeyError("broken")

    with pytest.raises(KeyError):
        await eventually(check, timeout=5)
    assert calls == [1]


def test_the_sync_twin_waits_the_same_way() -> None:
    counter = itertools.count()
    assert eventually_sync(lambda: next(counter), until=lambda n: n == 2, interval=0) == 2
    with pytest.raises(AssertionError, match=r"for nothing\(\) to hold; last seen: 0"):

        def nothing() -> int:
            return 0

        eventually_sync(nothing, timeout=0.05)


def test_the_sync_twin_refuses_a_coroutine() -> None:
    async def fetch() -> int:
        return 1

    with pytest.raises(TypeError, match="use eventually"):
        eventually_sync(fetch)
