"""How one event changes an audit's state: ``evolve`` never raises, ``fold`` reduces.

The state, ``AuditState``, is :mod:`statemachine.audit`'s, named here too (as is ``initial``):
every column of the audit row that events determine. Status changes come from the transition
table alone (:func:`statemachine.machine.next_status`: every destination is the row's); an
event without a transition is recorded, not applied — except that observations of a terminal
audit still update what was last observed, which is information, not lifecycle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from functools import reduce
from typing import Any

from statemachine.audit import AuditState, initial
from statemachine.events import (
    AuditCompleted,
    AuditEvent,
    AuditFailed,
    AuditFailureDiscarded,
    AuditFailureHeld,
    AuditFailureReleased,
    AuditFailureSimulated,
    AuditProgressed,
    AuditRestored,
    AuditStarted,
    WorkflowInstanceAttached,
    WorkflowTerminationRequested,
)
from statemachine.machine import INITIAL, Row, next_status
from statemachine.vocabulary import STALL_STATUSES

__all__ = ["AuditState", "evolve", "fold", "initial"]

_LOST = frozenset({"not_found", "not_attached"})


def _observed(state: AuditState, event: AuditEvent) -> AuditState:
    """Record what a probe saw (for the watchdog's fairness and on-demand freshness)."""
    if event.type == "WorkflowStatusObserved":
        d = event.data
        if d.workflow_instance_id != state.workflow_instance_id:
            return state  # rule 1: an observation of another instance is stale
        status = d.status
        ended = state.instance_ended_at
        if status != "complete":
            ended = None  # a restarted instance is no longer complete
        elif ended is None:
            ended = d.workflow_ended_at or d.observed_at
        seen = _later(state.last_observed_at, d.observed_at)
        if (
            state.held_decision_id is not None
            and status not in _LOST
            and not (state.held_rule == "stalled" and status in STALL_STATUSES)
        ):
            # The instance was found after all: a decision held for its loss no longer stands.
            return state._replace(
                last_observed_status=status,
                last_observed_at=seen,
                instance_ended_at=ended,
                held_decision_id=None,
                held_at=None,
            )
        return state._replace(
            last_observed_status=status,
            last_observed_at=seen,
            instance_ended_at=ended,
        )
    if event.type == "WorkflowProbeFailed":
        if event.data.workflow_instance_id != state.workflow_instance_id:
            return state
        return state._replace(
            last_observed_status="probe_failed",
            last_observed_at=_later(state.last_observed_at, event.data.observed_at),
        )
    return state


def _later(a: datetime | None, b: datetime) -> datetime:
    return b if a is None or b > a else a


def evolve(state: AuditState, event: AuditEvent) -> AuditState:
    """The state after ``event``. Total: any event on any state gives a state.

    The transition table gives the row ``event`` takes from ``state``; the event's type says
    what else it changes. Without a row the event is recorded, not applied, but observations
    of an audit that exists still refresh what was last seen."""
    row = next_status(state.status, event.type, state)
    if row is None:
        return _observed(state, event) if state.status != INITIAL else state
    return _APPLY.get(event.type, _kept)(state, event, row)


def _started(state: AuditState, event: AuditStarted, row: Row) -> AuditState:
    d = event.data
    return state._replace(
        status=row.dest,
        project_id=d.project_id,
        organization_id=d.organization_id,
        started_by_user_id=d.started_by_user_id,
        start_url=d.start_url,
        workflow_instance_id=d.workflow_instance_id,
        started_at=d.started_at or event.occurred_at,
        current_phase=d.current_phase or "discovery",
        pages_total=d.pages_total,
        workflow=d.workflow,
        progress_event_id=str(event.event_id),
    )


def _attached(state: AuditState, event: WorkflowInstanceAttached, row: Row) -> AuditState:
    new_id = event.data.workflow_instance_id
    if new_id == state.workflow_instance_id:
        return state._replace(progress_event_id=str(event.event_id), stalled_at=None)
    return state._replace(
        workflow_instance_id=new_id,
        instance_ended_at=None,
        last_observed_status=None,
        held_decision_id=None,  # a hold was about the instance that is replaced
        held_at=None,
        progress_event_id=str(event.event_id),
        stalled_at=None,
        termination_requested_at=None,
    )


def _progressed(state: AuditState, event: AuditProgressed, row: Row) -> AuditState:
    progress = event.data
    phase, crawled, total = progress.current_phase, progress.pages_crawled, progress.pages_total
    return state._replace(
        current_phase=phase or state.current_phase,
        pages_crawled=crawled if crawled is not None else state.pages_crawled,
        pages_total=total if total is not None else state.pages_total,
        progress_event_id=str(event.event_id),
        stalled_at=None,
        **_STALL_HOLD_ENDS if state.held_rule == "stalled" else {},
    )


# Progress ends a stall's hold: the audit is going somewhere after all.
_STALL_HOLD_ENDS: dict[str, Any] = {"held_decision_id": None, "held_at": None}


def _completed(state: AuditState, event: AuditCompleted, row: Row) -> AuditState:
    done = event.data
    crawled, total = done.pages_crawled, done.pages_total
    completed_at = done.completed_at or event.occurred_at
    if state.status == "failed":  # overturned: the failure is cleared
        return state._replace(
            status=row.dest,
            pages_crawled=crawled if crawled is not None else state.pages_crawled,
            pages_total=total if total is not None else state.pages_total,
            completed_at=completed_at,
            failed_at=None,
            overturned=True,
            error_code=None,
            error_detail=None,
            failed_phase=None,
            failed_by=None,
            reconciled_by=None,
            held_decision_id=None,
            held_at=None,
        )
    return state._replace(
        status=row.dest,
        pages_crawled=crawled if crawled is not None else state.pages_crawled,
        pages_total=total if total is not None else state.pages_total,
        completed_at=completed_at,
        held_decision_id=None,
        held_at=None,
        stalled_at=None,
    )


def _failed(state: AuditState, event: AuditFailed, row: Row) -> AuditState:
    failure = event.data
    return state._replace(
        status=row.dest,
        error_code=failure.error_code,
        error_detail=failure.error_detail,
        failed_phase=failure.failed_phase
        if failure.failed_phase is not None
        else state.current_phase,
        failed_by=failure.failed_by.value,
        reconciled_by=failure.reconciled_by.value if failure.reconciled_by else None,
        failed_at=event.occurred_at,  # completed_at stays unset: a failure completes nothing
        held_decision_id=None,
        held_at=None,
        stalled_at=None,
    )


def _restored(state: AuditState, event: AuditRestored, row: Row) -> AuditState:
    """Running again, the failure cleared. A state that kept no facts of the failed audit
    (a consumer's compact one: no ``started_at``) takes them from the restore."""
    facts: dict[str, Any] = {}
    if state.started_at is None:
        r = event.data.resume
        facts = {
            "project_id": r.project_id,
            "organization_id": r.organization_id,
            "started_by_user_id": r.started_by_user_id,
            "start_url": r.start_url,
            "workflow_instance_id": r.workflow_instance_id,
            "started_at": r.started_at or event.occurred_at,
            "current_phase": r.current_phase or "discovery",
            "pages_total": r.pages_total,
            "pages_crawled": event.data.pages_crawled,
        }
    return state._replace(
        status=row.dest,
        completed_at=None,
        failed_at=None,
        error_code=None,
        error_detail=None,
        failed_phase=None,
        failed_by=None,
        reconciled_by=None,
        held_decision_id=None,
        held_at=None,
        progress_event_id=str(event.event_id),
        stalled_at=None,
        termination_requested_at=None,
        **facts,
    )


def _held(state: AuditState, event: AuditFailureHeld, row: Row) -> AuditState:
    if state.held_decision_id is not None:
        return state  # one hold at a time: the first stands until it ends
    rule = event.data.decision.rule
    return state._replace(
        held_decision_id=str(event.event_id),
        held_at=event.occurred_at,
        held_rule=rule,
        stalled_at=(state.stalled_at or event.occurred_at)
        if rule == "stalled"
        else state.stalled_at,
    )


def _unheld(
    state: AuditState, event: AuditFailureReleased | AuditFailureDiscarded, row: Row
) -> AuditState:
    if state.held_decision_id != str(event.data.held_id):
        return state  # not the pending hold (already ended, or never made)
    return state._replace(held_decision_id=None, held_at=None)


def _simulated(state: AuditState, event: AuditFailureSimulated, row: Row) -> AuditState:
    """A verdict recorded without failing: a stall's marks the audit stalled (reported)."""
    if event.data.rule == "stalled" and state.stalled_at is None:
        return state._replace(stalled_at=event.occurred_at)
    return state


def _terminating(state: AuditState, event: WorkflowTerminationRequested, row: Row) -> AuditState:
    if event.data.workflow_instance_id != state.workflow_instance_id:
        return state  # about an instance the audit no longer runs in
    return state._replace(
        stalled_at=state.stalled_at or event.occurred_at,
        termination_requested_at=event.occurred_at,
    )


def _kept(state: AuditState, event: AuditEvent, row: Row) -> AuditState:
    """Observations, probe failures and simulated failures: the table keeps the status."""
    return _observed(state, event)


# How each type of event changes the state it applies to (others: :func:`_kept`).
_APPLY: dict[str, Callable[..., AuditState]] = {
    model.model_fields["type"].default: apply
    for model, apply in (
        (AuditStarted, _started),
        (WorkflowInstanceAttached, _attached),
        (AuditProgressed, _progressed),
        (AuditCompleted, _completed),
        (AuditFailed, _failed),
        (AuditRestored, _restored),
        (AuditFailureHeld, _held),
        (AuditFailureReleased, _unheld),
        (AuditFailureDiscarded, _unheld),
        (AuditFailureSimulated, _simulated),
        (WorkflowTerminationRequested, _terminating),
    )
}


def fold(events: Iterable[AuditEvent], state: AuditState | None = None) -> AuditState | None:
    """Reduce events (of one audit) to its state; ``None`` for no events and no state."""
    it = iter(events)
    if state is None:
        first = next(it, None)
        if first is None:
            return None
        state = evolve(initial(first.audit_id), first)
    return reduce(evolve, it, state)
