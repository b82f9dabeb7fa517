"""The reconciler's verdicts in the metrics: failures under their rule with the outcome, and
verdicts that changed nothing by what they found, never under a failure rule's name."""

from __future__ import annotations

from dataclasses import replace

import pytest

from consumers.components.reconciler.counting import count_verdict, flush_counts
from consumers.runtime.metrics import REGISTRY
from statemachine.events import AuditEvent
from statemachine.policy import Policy
from statemachine.rules import decide
from statemachine.state import fold
from tests.contracts.projection_store import at, observed, probe_failed, started

RUNNING = fold([started("a-1", at(0), instance="wf-1")])
DEFAULT = Policy()


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def judged(event: AuditEvent, policy: Policy = DEFAULT) -> None:
    verdict, decision = decide(RUNNING, event, policy)
    count_verdict(verdict, decision, event)
    flush_counts()


@pytest.mark.parametrize(
    ("event", "found"),
    [
        (observed("a-1", "not_found", at(5)), "within_grace"),
        (observed("a-1", "running", at(60)), "healthy"),
        (observed("a-1", "complete", at(60), workflow_ended_at=at(59)), "finalize_pending"),
        (observed("a-1", "running", at(60), instance="wf-old"), "stale_instance"),
        (probe_failed("a-1", at(60)), "probe_failed"),
    ],
)
def test_a_verdict_that_changed_nothing_is_counted_by_what_it_found(
    event: AuditEvent, found: str
) -> None:
    before = value("auditrec_observations_judged_total", verdict=found)
    decided = sum(
        s.value for m in REGISTRY.collect() if m.name == "auditrec_decisions" for s in m.samples
    )
    judged(event)
    assert value("auditrec_observations_judged_total", verdict=found) == before + 1
    after = sum(
        s.value for m in REGISTRY.collect() if m.name == "auditrec_decisions" for s in m.samples
    )
    assert after == decided  # no decision counted


@pytest.mark.parametrize(
    ("policy", "outcome", "sweep_size"),
    [
        (Policy(), "failed", None),
        (replace(Policy(), shadow=True), "shadow", None),
        (Policy(), "held", 50),  # a sweep large enough for the brake
    ],
)
def test_a_failure_is_counted_under_its_rule_with_the_outcome(
    policy: Policy, outcome: str, sweep_size: int | None
) -> None:
    lost = observed("a-1", "not_found", at(60), sweep_size=sweep_size, sweep_id="s-1")
    labels = {"rule": "instance_lost", "error_code": "instance_lost", "trigger": "watchdog"}
    before = value("auditrec_decisions_total", **labels, outcome=outcome)
    judged(lost, policy)
    assert value("auditrec_decisions_total", **labels, outcome=outcome) == before + 1


def test_counts_reach_the_metrics_when_flushed_once_a_batch() -> None:
    healthy = observed("a-1", "running", at(60))
    before = value("auditrec_observations_judged_total", verdict="healthy")
    for _ in range(3):
        verdict, decision = decide(RUNNING, healthy, DEFAULT)
        count_verdict(verdict, decision, healthy)
    assert value("auditrec_observations_judged_total", verdict="healthy") == before
    flush_counts()
    assert value("auditrec_observations_judged_total", verdict="healthy") == before + 3
    flush_counts()  # nothing counted since: nothing added
    assert value("auditrec_observations_judged_total", verdict="healthy") == before + 3
