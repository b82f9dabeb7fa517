"""The one rule of what may enter from outside: the publisher types, a failure only as the
workflow's; every type auditrec writes is refused, naming it; unknown types are left to
validation (422, not 403)."""

from __future__ import annotations

import pytest

from statemachine.admission import PUBLIC_TYPES, PUBLISHED_FAILED_BY, refusal
from statemachine.events import EVENT_TYPES


@pytest.mark.parametrize("kind", sorted(set(EVENT_TYPES) - set(PUBLIC_TYPES)))
def test_every_type_auditrec_writes_is_refused_naming_it(kind: str) -> None:
    why = refusal({"type": kind, "data": {}})
    assert why is not None and why.startswith(f"type: {kind} is written by auditrec only")


@pytest.mark.parametrize("kind", PUBLIC_TYPES)
def test_the_publisher_types_may_enter(kind: str) -> None:
    data = {"failed_by": "workflow"} if kind == "AuditFailed" else {}
    assert refusal({"type": kind, "data": data}) is None


@pytest.mark.parametrize("by", ["reconciler", "operator", "someone"])
def test_a_failure_enters_only_as_the_workflows(by: str) -> None:
    why = refusal({"type": "AuditFailed", "data": {"failed_by": by}})
    assert why is not None and f"failed_by {by!r}" in why
    assert PUBLISHED_FAILED_BY == ("workflow",)


@pytest.mark.parametrize(
    "envelope", [{}, {"type": 3}, {"type": "Nope"}, {"type": "AuditFailed", "data": "x"}]
)
def test_what_is_not_an_event_is_left_to_validation(envelope: dict[str, object]) -> None:
    assert refusal(envelope) is None
