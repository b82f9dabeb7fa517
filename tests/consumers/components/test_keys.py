"""The key ``(audit_id, event_id)`` as telemetry folds by it (the reconciler's is in
``test_checkpoints``): an event whose key was folded is passed over, a duplicate and a
conflict alike, the same id under another audit is folded, and an audit's keys go when it
ends."""

from __future__ import annotations

from consumers.components.keys import Keys, holds
from consumers.components.telemetry.component import Telemetry
from statemachine.events import AuditEvent
from statemachine.state import AuditState
from tests.contracts.projection_store import at, completed, progressed, started


def same_id(event: AuditEvent, as_: AuditEvent) -> AuditEvent:
    return event.model_copy(update={"event_id": as_.event_id})


def test_telemetry_passes_over_a_folded_key_and_folds_it_under_another_audit() -> None:
    states: dict[str, AuditState] = {}
    keys: Keys = {}
    start = started("a-1", at(0))
    assert Telemetry._fold(states, keys, start) is not None

    # a repeat with a new time, and a completion under the start's id: passed over
    assert Telemetry._fold(states, keys, start.model_copy(update={"occurred_at": at(5)})) is None
    assert Telemetry._fold(states, keys, same_id(completed("a-1", at(6)), start)) is None
    assert states["a-1"].status == "running"

    # the same id under another audit: another event
    folded = Telemetry._fold(states, keys, same_id(started("a-2", at(1)), start))
    assert folded is not None and folded[1].status == "running"
    assert keys == {"a-1": start.event_id.bytes, "a-2": start.event_id.bytes}

    # a step is folded once; an audit that ends is forgotten, keys and all
    step = progressed("a-1", at(2), pages_crawled=3)
    assert Telemetry._fold(states, keys, step) is not None
    assert Telemetry._fold(states, keys, step) is None
    assert Telemetry._fold(states, keys, completed("a-1", at(9))) is not None
    assert "a-1" not in states and "a-1" not in keys


def test_an_id_is_held_only_where_an_id_starts() -> None:
    """Ids are kept one after the other: bytes that span two of them are not an id."""
    one, two = bytes(range(16)), bytes(range(16, 32))
    ids = bytearray(one + two)
    assert holds(ids, one) and holds(ids, two)
    assert not holds(ids, bytes(range(8, 24)))  # the end of one and the start of the other
    # a match across two ids before a real one further on is passed over
    spanning = bytes(range(8, 24))
    assert holds(bytearray(one + two + spanning), spanning)
