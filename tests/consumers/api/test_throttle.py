"""The failed-authentication throttle's buckets (consumers.api.throttle.Throttle) on a clock the
test moves: a burst, the refill rate, the wait it announces, the bound on clients kept (which a
flood cannot use to free a guesser), what a client is (an IPv4 address, an IPv6 /64), and the
paths it lets through. The HTTP side (429 with Retry-After from a real serve) is
tests/security/test_bounded.py."""

from __future__ import annotations

from consumers.api.throttle import Throttle, client_of, unthrottled


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


def test_a_flood_of_other_clients_never_makes_the_throttle_forget_a_held_guesser() -> None:
    clock = Clock()
    throttle = Throttle(per_minute=10, clock=clock, max_clients=100)
    for _ in range(10):
        throttle.failed("guesser")  # held first: the least recently failed of all
    half = "half-way"
    for _ in range(5):
        throttle.failed(half)  # not held: it may go

    for n in range(5000):  # one failure each from many addresses, faster than a refill
        throttle.failed(f"flood-{n}")
        assert throttle.retry_after("guesser") is not None, n

    assert len(throttle) <= 100
    assert throttle.retry_after(half) is None  # forgotten: it was not held


def test_held_buckets_alone_are_kept_past_the_bound_and_pruned_once_released() -> None:
    clock = Clock()
    throttle = Throttle(per_minute=1, clock=clock, max_clients=10)  # held 60 s per failure
    for n in range(30):
        throttle.failed(f"held-{n}")

    assert len(throttle) == 30  # every one held: none dropped
    assert all(throttle.retry_after(f"held-{n}") is not None for n in range(30))

    clock.now += 3600  # all forgiven
    for n in range(20):
        throttle.failed(f"later-{n}")
    assert len(throttle) <= 20
    assert throttle.retry_after("held-0") is None


def test_an_ipv6_client_is_its_64_and_an_ipv4_client_its_address() -> None:
    assert client_of("2001:db8:1:2::a") == client_of("2001:db8:1:2:ffff:ffff:ffff:ffff")
    assert client_of("2001:db8:1:2::a") == "2001:db8:1:2::/64"
    assert client_of("2001:db8:1:3::a") != client_of("2001:db8:1:2::a")
    assert client_of("198.51.100.1") != client_of("198.51.100.2")
    assert client_of("::ffff:198.51.100.1") == "198.51.100.1"  # a dual-stack socket's IPv4
    assert client_of("fe80::1%eth0") == "fe80::/64"
    assert client_of("unix-socket") == "unix-socket"


def test_only_what_answers_without_a_token_is_let_through() -> None:
    assert unthrottled(public_readyz=False) == {"/healthz", "/metrics"}
    assert unthrottled(public_readyz=True) == {"/healthz", "/metrics", "/readyz"}
