"""``replace``, the copy ``evolve`` makes of a state per event, and the copies that change
fields named in advance, behave as ``dataclasses.replace`` (they are generated from the fields,
without ``__init__``)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statemachine.copying import replacer
from statemachine.machine import STATES
from statemachine.state import AuditState, replace

FIELDS = [f.name for f in dataclasses.fields(AuditState)]
WHEN = st.none() | st.datetimes(timezones=st.just(UTC))
TEXT = st.none() | st.text(max_size=8)

states = st.builds(
    AuditState,
    audit_id=st.text(min_size=1, max_size=8),
    project_id=TEXT,
    workflow_instance_id=TEXT,
    status=st.sampled_from(STATES),
    current_phase=TEXT,
    pages_crawled=st.none() | st.integers(0, 10**6),
    started_at=WHEN,
    failed_by=TEXT,
    last_observed_at=WHEN,
    overturned=st.booleans(),
    held_decision_id=TEXT,
    instance_ended_at=WHEN,
)


@given(states, states, st.sets(st.sampled_from(FIELDS)))
def test_replace_equals_dataclasses_replace(
    state: AuditState, other: AuditState, changed: set[str]
) -> None:
    changes = {name: getattr(other, name) for name in changed}

    copy = replace(state, **changes)

    assert copy == dataclasses.replace(state, **changes)
    assert copy is not state
    assert type(copy) is AuditState
    for name in FIELDS:
        assert getattr(copy, name) is (changes[name] if name in changes else getattr(state, name))


def test_replace_leaves_the_original_as_it_was() -> None:
    state = AuditState(audit_id="a-1", status="running", current_phase="crawl")

    replace(state, status="failed", completed_at=datetime(2026, 11, 30, tzinfo=UTC))

    assert state == AuditState(audit_id="a-1", status="running", current_phase="crawl")


def test_replace_refuses_an_unknown_field() -> None:
    with pytest.raises(TypeError, match="no_such_field"):
        replace(AuditState(audit_id="a-1"), no_such_field=1)


def test_a_copy_is_frozen_like_any_state() -> None:
    copy = replace(AuditState(audit_id="a-1"), status="running")

    with pytest.raises(dataclasses.FrozenInstanceError):
        copy.status = "failed"  # type: ignore[misc]


@given(states, states, st.lists(st.sampled_from(FIELDS), min_size=1, unique=True))
def test_a_copy_of_named_fields_equals_dataclasses_replace(
    state: AuditState, other: AuditState, named: list[str]
) -> None:
    copy_of = replacer(AuditState, *named)
    changes = {name: getattr(other, name) for name in named}

    copy = copy_of(state, **changes)

    assert copy == dataclasses.replace(state, **changes)
    assert type(copy) is AuditState and copy is not state
    for name in FIELDS:
        assert getattr(copy, name) is (changes[name] if name in changes else getattr(state, name))


def test_a_copy_of_named_fields_needs_each_of_them_and_no_other() -> None:
    copy_of = replacer(AuditState, "status", "error_code")
    state = AuditState(audit_id="a-1")

    with pytest.raises(TypeError, match="error_code"):
        copy_of(state, status="failed")
    with pytest.raises(TypeError, match="current_phase"):
        copy_of(state, status="failed", error_code="oom", current_phase="crawl")
    with pytest.raises(TypeError, match="no_such_field"):
        replacer(AuditState, "status", "no_such_field")


def test_only_a_frozen_slots_dataclass_is_copied_this_way() -> None:
    @dataclasses.dataclass(frozen=True)
    class WithDict:
        a: int = 0

    with pytest.raises(TypeError, match="slots"):
        replacer(WithDict)
    with pytest.raises(TypeError, match="not a dataclass"):
        replacer(int)
