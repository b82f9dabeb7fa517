"""``RowFold``, the stores' batch fold, is ``project`` applied event by event (hypothesis)."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from projections.row import AuditRow, RowFold, project
from statemachine.events import AuditEvent
from tests.contracts.projection_store import lifecycle_mix, observed, started

MIX = [*lifecycle_mix(), started("a-late", datetime(2026, 12, 1, tzinfo=UTC))]
STORED_AT = datetime(2026, 11, 30, 12, tzinfo=UTC)


def one_by_one(rows: dict[str, AuditRow], events: list[AuditEvent]) -> dict[str, AuditRow]:
    out = dict(rows)
    written: dict[str, AuditRow] = {}
    for event in events:
        row = out[event.audit_id] = project(out.get(event.audit_id), event)
        if row.state.exists:
            written[event.audit_id] = row
    return written


def stored(events: list[AuditEvent]) -> dict[str, AuditRow]:
    """Rows as a store holds them after ``events`` (with the time it wrote them)."""
    rows: dict[str, AuditRow] = {}
    for event in events:
        rows[event.audit_id] = project(rows.get(event.audit_id), event)
    return {
        audit_id: AuditRow(row.state, row.version, row.last_event_id, STORED_AT)
        for audit_id, row in rows.items()
        if row.state.exists
    }


@settings(max_examples=150, deadline=None)
@given(
    before=st.lists(st.sampled_from(MIX), max_size=12),
    batch=st.lists(st.sampled_from(MIX), max_size=30),
)
def test_folding_a_batch_equals_projecting_its_events_one_by_one(
    before: list[AuditEvent], batch: list[AuditEvent]
) -> None:
    # given the rows a store holds after some events (any order, repeats included)
    rows = stored(before)
    expected = one_by_one(rows, batch)

    # when another batch of events is folded into them
    folding = RowFold(rows)
    for event in batch:
        folding.add(event)

    # then each changed row is exactly what project() gives event by event
    assert folding.changed() == expected
    # and the stored rows were not touched
    assert rows == stored(before)


def test_an_audit_seen_only_before_its_start_has_no_row() -> None:
    # given an observation of an audit that has not started
    folding = RowFold({})
    folding.add(observed("a-unknown", "running", datetime(2026, 11, 30, 9, tzinfo=UTC)))

    # then there is no row to write
    assert folding.changed() == {}
