"""The health board: a component is failing after three failed steps in a row, stalled when
it has lag and makes no progress for a minute, and well again as soon as it is."""

from __future__ import annotations

from consumers.runtime.health import FAILING_AFTER, STALLED_AFTER, HealthBoard
from consumers.runtime.metrics import COMPONENT_HEALTHY


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def healthy(name: str) -> float:
    return COMPONENT_HEALTHY.labels(name)._value.get()


def test_a_component_failing_steps_in_a_row_is_named_until_a_step_succeeds() -> None:
    board = HealthBoard(Clock())
    board.started("reconciler-h1")

    for _ in range(FAILING_AFTER - 1):
        board.failed("reconciler-h1", RuntimeError("broker down"))
    assert board.problems() == {}

    board.failed("reconciler-h1", RuntimeError("broker down"))
    problem = board.problems()["reconciler-h1"]
    assert problem.startswith(f"failing ({FAILING_AFTER} steps in a row)")
    assert "RuntimeError: broker down" in problem
    assert healthy("reconciler-h1") == 0

    board.stepped("reconciler-h1", 0)
    assert board.problems() == {}
    assert healthy("reconciler-h1") == 1


def test_a_component_with_lag_and_no_progress_for_a_minute_is_stalled() -> None:
    clock = Clock()
    board = HealthBoard(clock)
    board.started("projector-h2")

    board.lagging("projector-h2", 500)
    board.stepped("projector-h2", 0)
    clock.now += STALLED_AFTER - 1
    assert board.problems() == {}

    clock.now += 1
    assert board.problems()["projector-h2"].startswith("stalled: lag 500, no progress for 60s")

    board.stepped("projector-h2", 200)  # progress, although still behind
    assert board.problems() == {}


def test_lag_without_records_to_read_never_stalls() -> None:
    clock = Clock()
    board = HealthBoard(clock)
    board.started("probe-h3")
    board.lagging("probe-h3", 0)
    clock.now += 10 * STALLED_AFTER
    board.stepped("probe-h3", 0)

    assert board.problems() == {}
