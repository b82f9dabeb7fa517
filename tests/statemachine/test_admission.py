"""The one rule of what may enter from outside: the publisher types, a failure only as the
workflow's and without a reconciler decision's fields, no producer of auditrec's own, no actor
but who authenticated; every type auditrec writes is refused, naming it; unknown types are
left to validation (422, not 403)."""

from __future__ import annotations

import pytest

from consumers.components import brake, ingest, probe, subscriber, watchdog
from consumers.operations import action_events
from statemachine import failure
from statemachine.admission import (
    AUDITREC_PRODUCERS,
    PUBLIC_TYPES,
    PUBLISHED_FAILED_BY,
    RECONCILER_FIELDS,
    refusal,
)
from statemachine.events import EVENT_TYPES


@pytest.mark.parametrize("kind", sorted(set(EVENT_TYPES) - set(PUBLIC_TYPES)))
def test_every_type_auditrec_writes_is_refused_naming_it(kind: str) -> None:
    why = refusal({"type": kind, "data": {}}, None)
    assert why is not None and why.startswith(f"type: {kind} is written by auditrec only")


@pytest.mark.parametrize("kind", PUBLIC_TYPES)
def test_the_publisher_types_may_enter(kind: str) -> None:
    data = {"failed_by": "workflow"} if kind == "AuditFailed" else {}
    assert refusal({"type": kind, "data": data}, None) is None


@pytest.mark.parametrize("by", ["reconciler", "operator", "someone"])
def test_a_failure_enters_only_as_the_workflows(by: str) -> None:
    why = refusal({"type": "AuditFailed", "data": {"failed_by": by}}, "token:crawler")
    assert why is not None and f"failed_by {by!r}" in why
    assert PUBLISHED_FAILED_BY == ("workflow",)


@pytest.mark.parametrize(
    "envelope", [{}, {"type": 3}, {"type": "Nope"}, {"type": "AuditFailed", "data": "x"}]
)
def test_what_is_not_an_event_is_left_to_validation(envelope: dict[str, object]) -> None:
    assert refusal(envelope, None) is None


@pytest.mark.parametrize("field", RECONCILER_FIELDS)
def test_a_workflow_failure_carries_no_reconciler_decision_field(field: str) -> None:
    # given a workflow's own failure dressed up with one field of a reconciler's decision
    values = {
        "rule": "errored",
        "reconciled_by": "watchdog",
        "workflow_status": "errored",
        "policy": {"stale_running_after_s": 900},
    }
    data = {"error_code": "oom", "error_detail": "x", "failed_by": "workflow"}
    envelope = {"type": "AuditFailed", "data": {**data, field: values[field]}}

    # then it is refused, naming the field
    why = refusal(envelope, "token:crawler")
    assert why is not None and why.startswith(f"data.{field}: only auditrec's reconciler")
    # and the same failure without it enters
    assert refusal({"type": "AuditFailed", "data": data}, "token:crawler") is None


def test_auditrec_s_own_producers_are_every_component_s() -> None:
    own = {
        failure.PRODUCER,
        watchdog.PRODUCER,
        probe.PRODUCER,
        brake.PRODUCER,
        ingest.PRODUCER,
        action_events.PRODUCER,
        subscriber.PRODUCER,
    }
    assert own == set(AUDITREC_PRODUCERS)


@pytest.mark.parametrize("producer", AUDITREC_PRODUCERS)
@pytest.mark.parametrize("kind", PUBLIC_TYPES)
def test_no_publisher_names_a_producer_of_auditrec_s_own(producer: str, kind: str) -> None:
    why = refusal({"type": kind, "producer": producer, "data": {}}, "token:crawler")
    assert why is not None and why.startswith(f"producer: {producer!r} is one of auditrec's")
    assert refusal({"type": kind, "producer": "crawler", "data": {}}, "token:crawler") is None


@pytest.mark.parametrize(
    ("claimed", "actor", "refused"),
    [
        ("token:crawler", "token:crawler", False),
        ("cli:alice", "cli:alice", False),
        ("token:ops", "token:crawler", True),
        ("auditrec", "cli:alice", True),
        ("token:crawler", None, True),  # the ingest topic authenticates no one
        (None, None, False),
    ],
)
def test_an_actor_is_only_who_authenticated(
    claimed: str | None, actor: str | None, refused: bool
) -> None:
    data = {"error_code": "oom", "error_detail": "x", "failed_by": "workflow", "actor": claimed}
    why = refusal({"type": "AuditFailed", "data": data}, actor)
    assert (why is not None) == refused
    if refused:
        assert why is not None and why.startswith(f"data.actor: {claimed!r} is not who")
