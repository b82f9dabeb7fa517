"""An audit's state as the events determine it (``AuditState``).

``AuditState`` carries every column of the audit row that events determine (DESIGN §6); the
projection adds only bookkeeping (version, last event, update time). How an event changes it is
:mod:`statemachine.state`'s (which names everything here too).

It is an immutable record, a ``NamedTuple``: an event's effect is a copy with some fields
changed (``state._replace(...)``).
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from statemachine.machine import INITIAL

__all__ = ["AuditState", "initial"]


class AuditState(NamedTuple):
    # The fields in the order of the audit row's columns (DESIGN §6).
    audit_id: str
    project_id: str | None = None
    organization_id: str | None = None
    started_by_user_id: str | None = None
    start_url: str | None = None
    workflow_instance_id: str | None = None
    status: str = INITIAL
    current_phase: str | None = None
    pages_crawled: int | None = None
    pages_total: int | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None  # a completion's time: never set on a failure
    failed_at: datetime | None = None  # the failure's time, while the audit is failed
    error_code: str | None = None
    error_detail: str | None = None
    failed_phase: str | None = None
    failed_by: str | None = None
    reconciled_by: str | None = None
    last_observed_status: str | None = None
    last_observed_at: datetime | None = None
    overturned: bool = False
    # A reconciler decision held by the mass-failure brake (its AuditFailureHeld's id), if any.
    held_decision_id: str | None = None
    held_at: datetime | None = None
    # The rule of the decision held (meaningful while one is): a stall's hold stands while the
    # instance runs; a loss's ends when the instance is found.
    held_rule: str | None = None
    # When the current instance was first seen ``complete`` (or its reported end): rule 6.
    instance_ended_at: datetime | None = None
    # The workflow the audit runs in (``None``: the default, AUDITREC_CLOUDFLARE_WORKFLOW).
    workflow: str | None = None
    # The latest publisher event's id (a start, an attach, progress, a restoration): a stall
    # verdict stands only on the very progress the watchdog read (DESIGN §10).
    progress_event_id: str | None = None
    # When a stall verdict was recorded for the running audit (reported, or a termination
    # requested); cleared by the next progress and by the audit's end.
    stalled_at: datetime | None = None
    # When auditrec asked for the instance's termination for a stall: its `terminated` is then
    # the stall's, failed `stalled`.
    termination_requested_at: datetime | None = None

    @property
    def exists(self) -> bool:
        return self.status != INITIAL


def initial(audit_id: str) -> AuditState:
    """The state of an audit before its first event."""
    return AuditState(audit_id=audit_id)
