"""The reconciler's log lines: a decision at INFO with its rule and reason, an observation that
changed nothing at DEBUG with why, nothing at a level filtered out. The levels are read once a
batch, so a configuration made after the reconciler was built applies."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import structlog

from consumers.components.reconciler import Reconciler
from statemachine.policy import Policy
from tests.contracts.projection_store import at, observed, started
from tests.pipeline import Pipeline, append, run_until_idle

OOM = {"name": "Error", "message": "Worker exceeded memory limit"}


@contextmanager
def logging_at(level: int) -> Iterator[list[dict[str, Any]]]:
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(level))
    try:
        with structlog.testing.capture_logs() as logs:
            yield logs
    finally:
        structlog.configure(**saved)


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        (logging.DEBUG, {"judged", "audit failed"}),
        (logging.INFO, {"audit failed"}),
        (logging.WARNING, set()),
    ],
)
async def test_decisions_and_verdicts_are_logged_at_their_levels(
    pipeline: Pipeline, level: int, expected: set[str]
) -> None:
    # given a healthy audit and a dead one, and a reconciler built before logging is set up
    await append(
        pipeline.log,
        pipeline.topics.lifecycle,
        [
            started("a-ok", at(0), instance="wf-ok"),
            started("a-dead", at(0), instance="wf-dead"),
            observed("a-ok", "running", at(30), instance="wf-ok"),
            observed("a-dead", "errored", at(30), instance="wf-dead", error=OOM),
        ],
    )
    component = Reconciler(pipeline.log, Policy())

    # when it judges both at `level`
    with logging_at(level) as logs:
        async with component:
            await run_until_idle(component)

    # then the lines of that level and above are there, with their rule and reason
    lines = {e["event"]: e for e in logs if e["event"] in ("judged", "audit failed")}
    assert set(lines) == expected
    assert component.decided == 1
    if "judged" in lines:
        assert lines["judged"]["audit_id"] == "a-ok"
        assert lines["judged"]["rule"] == "healthy"
        assert lines["judged"]["reason"] == "running, age 30m → healthy, no change"
    if "audit failed" in lines:
        failed = lines["audit failed"]
        assert (failed["audit_id"], failed["rule"], failed["error_code"]) == (
            "a-dead",
            "errored",
            "oom",
        )
        assert failed["reason"] == "errored (Error: Worker exceeded memory limit) → failed oom"
        assert failed["log_level"] == "info"
