"""The failed-authentication throttle's buckets (consumers.api.throttle.Throttle) on a clock the
test moves: a burst, the refill rate, the wait it announces, and the bound on clients kept.
The HTTP side (429 with Retry-After from a real serve) is tests/security/test_bounded.py."""

from __future__ import annotations

from consumers.api.throttle import Throttle


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_client_is_held_after_its_burst_and_let_go_at_the_refill_rate() -> None:
    clock = Clock()
    throttle = Throttle(per_minute=6, clock=clock)  # one failure every 10 s after the burst

    for _ in range(6):
        assert throttle.retry_after("a") is None
        throttle.failed("a")

    assert throttle.retry_after("a") == 10
    assert throttle.retry_after("b") is None  # another client is not held
    clock.now += 4
    assert throttle.retry_after("a") == 6
    clock.now += 6
    assert throttle.retry_after("a") is None  # one more try ...
    throttle.failed("a")
    assert throttle.retry_after("a") == 10  # ... and held again
    clock.now += 3600
    assert throttle.retry_after("a") is None
    for _ in range(6):  # the burst is back, never more
        throttle.failed("a")
    assert throttle.retry_after("a") == 10


def test_the_clients_kept_are_bounded_dropping_the_forgiven_then_the_oldest() -> None:
    clock = Clock()
    throttle = Throttle(per_minute=60, clock=clock, max_clients=3)
    for client in ("old", "forgiven"):
        throttle.failed(client)
    clock.now += 120  # both refilled
    for _ in range(60):
        throttle.failed("held")

    throttle.failed("new-1")
    throttle.failed("new-2")

    assert len(throttle) <= 3
    assert throttle.retry_after("held") is not None  # the guesser is still held
