"""Which operator actions an audit allows is the transition table's call, asked in one place."""

from __future__ import annotations

from functools import reduce

import pytest

from consumers.operations.action_events import can_fail, can_restore, check_restorable
from projections.row import AuditRow, project
from statemachine.errors import WrongState
from statemachine.events import AuditEvent
from tests.contracts.projection_store import completed, failed, started


def row_of(*events: AuditEvent) -> AuditRow:
    row = reduce(project, events, None)
    assert row is not None
    return row


@pytest.mark.parametrize(
    ("events", "fail", "restore"),
    [
        ((started("a"),), True, False),
        ((started("a"), completed("a")), False, False),
        ((started("a"), failed("a", by="workflow")), False, False),
        ((started("a"), failed("a", by="reconciler")), False, True),
        ((started("a"), failed("a", by="operator")), False, True),
    ],
    ids=[
        "running",
        "completed",
        "failed-by-workflow",
        "failed-by-reconciler",
        "failed-by-operator",
    ],
)
def test_an_audit_can_be_failed_while_running_and_restored_from_auditrecs_own_failures(
    events: tuple[AuditEvent, ...], fail: bool, restore: bool
) -> None:
    row = row_of(*events)
    assert (can_fail(row), can_restore(row)) == (fail, restore)
    if restore:
        check_restorable(row)
    else:
        with pytest.raises(WrongState):
            check_restorable(row)
