"""The key ``(audit_id, event_id)`` as telemetry folds by it (the reconciler's is in
``test_checkpoints`` and ``test_idempotency``): an event whose key was folded is passed over, a
duplicate and a conflict alike, the same id under another audit is folded, and an audit's keys
go once its state is final, not while a failure may still be overturned or restored."""

from __future__ import annotations

from consumers.components.keys import Keys, holds
from consumers.components.telemetry.component import Telemetry
from statemachine.events import AuditEvent, AuditFailed
from statemachine.machine import COMPLETED, FAILED, RUNNING, still_changes
from statemachine.state import AuditState
from tests.contracts.projection_store import at, completed, failed, progressed, started
from tests.statemachine.test_restore import restored


def same_id(event: AuditEvent, as_: AuditEvent) -> AuditEvent:
    return event.model_copy(update={"event_id": as_.event_id})


def test_telemetry_passes_over_a_folded_key_and_folds_it_under_another_audit() -> None:
    states: dict[str, AuditState] = {}
    keys: Keys = {}
    start = started("a-1", at(0))
    assert Telemetry.fold(states, keys, start) is not None

    # a repeat with a new time, and a completion under the start's id: passed over
    assert Telemetry.fold(states, keys, start.model_copy(update={"occurred_at": at(5)})) is None
    assert Telemetry.fold(states, keys, same_id(completed("a-1", at(6)), start)) is None
    assert states["a-1"].status == "running"

    # the same id under another audit: another event
    folded = Telemetry.fold(states, keys, same_id(started("a-2", at(1)), start))
    assert folded is not None and folded[1].status == "running"
    assert keys == {"a-1": start.event_id.bytes, "a-2": start.event_id.bytes}

    # a step is folded once; an audit that ends is forgotten, keys and all
    step = progressed("a-1", at(2), pages_crawled=3)
    assert Telemetry.fold(states, keys, step) is not None
    assert Telemetry.fold(states, keys, step) is None
    assert Telemetry.fold(states, keys, completed("a-1", at(9))) is not None
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


def test_the_table_says_which_terminal_states_still_change() -> None:
    def by(who: str | None) -> AuditState:
        return AuditState("a-1", status=FAILED, failed_by=who)

    assert still_changes(RUNNING) and not still_changes(COMPLETED, by(None))
    assert still_changes(FAILED, by("reconciler")) and still_changes(FAILED, by("operator"))
    assert not still_changes(FAILED, by("workflow"))


def test_telemetry_keeps_the_keys_of_a_failure_that_may_be_undone() -> None:
    states: dict[str, AuditState] = {}
    keys: Keys = {}
    start = started("a-1", at(0))
    stop = failed("a-1", at(1), by="operator", actor="alice")
    assert isinstance(stop, AuditFailed)
    for event in (start, stop):
        assert Telemetry.fold(states, keys, event) is not None
    # an operator's failure may be restored: its keys stay, as exact bytes
    assert type(keys["a-1"]) is bytes and len(keys["a-1"]) == 32

    # a restore under the start's id is a conflict: passed over, the audit is not followed
    undo = restored(stop).model_copy(update={"audit_id": "a-1"})
    assert (
        Telemetry.fold(states, keys, undo.model_copy(update={"event_id": start.event_id})) is None
    )
    assert states["a-1"].status == FAILED and states["a-1"].audit_id == ""

    # a restore of its own is followed again, and the completion after it forgets the audit
    folded = Telemetry.fold(states, keys, undo)
    assert folded is not None and folded[1].status == RUNNING and states["a-1"].audit_id == "a-1"
    assert Telemetry.fold(states, keys, completed("a-1", at(9))) is not None
    assert "a-1" not in states and "a-1" not in keys

    # a failure the workflow reported is final: its keys go at once
    assert Telemetry.fold(states, keys, started("a-2", at(0))) is not None
    assert Telemetry.fold(states, keys, failed("a-2", at(1))) is not None
    assert "a-2" not in states and "a-2" not in keys
