"""How long the Python client waits between attempts: doubling with jitter up to a bound, a
``Retry-After`` honoured up to its own bound, and refusing settings that cannot work."""

from __future__ import annotations

import pytest

from auditrec_client import Retry


def test_the_wait_doubles_with_jitter_up_to_the_bound() -> None:
    retry = Retry(backoff=0.2, max_backoff=1.0)
    for attempt, full in [(1, 0.2), (2, 0.4), (3, 0.8), (4, 1.0), (9, 1.0)]:
        waits = [retry.delay(attempt) for _ in range(200)]
        assert all(full / 2 <= w <= full for w in waits), (attempt, min(waits), max(waits))
        assert max(waits) - min(waits) > full / 10  # jittered, not one value


def test_retry_after_is_honoured_up_to_its_bound() -> None:
    retry = Retry(backoff=0.1, max_backoff=0.1, max_retry_after=5.0)
    assert retry.delay(1, "2") == 2.0
    assert retry.delay(1, "60") == 5.0
    assert retry.delay(1, "Wed, 21 Oct 2015 07:28:00 GMT") <= 0.1  # a date: the backoff


@pytest.mark.parametrize(
    "settings", [{"attempts": 0}, {"backoff": -1.0}, {"max_retry_after": -1.0}]
)
def test_settings_that_cannot_work_are_refused(settings: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Retry(**settings)  # type: ignore[arg-type]
