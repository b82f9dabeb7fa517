"""Builders of valid lifecycle events for the core's tests.

Plain functions (not fixtures) so hypothesis strategies can use them too. Time is explicit:
every builder takes the event's own time, defaulting to ``T0``; ids are explicit or drawn from
a counter, never random. The module name is unique on purpose: tests use rootdir-style
discovery (no ``__init__.py``), so helper modules share one namespace across test folders.
"""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from statemachine.events import (
    AuditCompleted,
    AuditEvent,
    AuditFailed,
    AuditFailureSimulated,
    AuditProgressed,
    AuditStarted,
    WorkflowInstanceAttached,
    WorkflowProbeFailed,
    WorkflowStatusObserved,
)
from statemachine.state import AuditState, fold

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
AUDIT = "a-123"
INSTANCE = "wf-1"
PRODUCER = "crawler"

_ids = itertools.count(1)


def new_id() -> uuid.UUID:
    return uuid.UUID(int=next(_ids))


def at(minutes: float = 0, seconds: float = 0) -> datetime:
    return T0 + timedelta(minutes=minutes, seconds=seconds)


def _envelope(when: datetime, event_id: uuid.UUID | None, audit_id: str, **extra: Any) -> dict:
    return {
        "event_id": event_id or new_id(),
        "audit_id": audit_id,
        "occurred_at": when,
        "producer": PRODUCER,
        **extra,
    }


def started(
    *,
    when: datetime = T0,
    instance: str | None = INSTANCE,
    audit_id: str = AUDIT,
    event_id: uuid.UUID | None = None,
    **data: Any,
) -> AuditStarted:
    payload = {"project_id": "p-1", "workflow_instance_id": instance, **data}
    return AuditStarted(**_envelope(when, event_id, audit_id), data=payload)


def attached(
    instance: str, *, when: datetime = T0, audit_id: str = AUDIT
) -> WorkflowInstanceAttached:
    return WorkflowInstanceAttached(
        **_envelope(when, None, audit_id), data={"workflow_instance_id": instance}
    )


def progressed(
    *,
    when: datetime = T0,
    phase: str | None = None,
    crawled: int | None = None,
    total: int | None = None,
    audit_id: str = AUDIT,
) -> AuditProgressed:
    return AuditProgressed(
        **_envelope(when, None, audit_id),
        data={"current_phase": phase, "pages_crawled": crawled, "pages_total": total},
    )


def completed(
    *,
    when: datetime = T0,
    crawled: int | None = None,
    total: int | None = None,
    completed_at: datetime | None = None,
    audit_id: str = AUDIT,
) -> AuditCompleted:
    return AuditCompleted(
        **_envelope(when, None, audit_id),
        data={"pages_crawled": crawled, "pages_total": total, "completed_at": completed_at},
    )


def failed(
    *,
    when: datetime = T0,
    by: str = "workflow",
    code: str = "unknown",
    detail: str = "boom",
    phase: str | None = None,
    reconciled_by: str | None = None,
    audit_id: str = AUDIT,
) -> AuditFailed:
    return AuditFailed(
        **_envelope(when, None, audit_id),
        data={
            "error_code": code,
            "error_detail": detail,
            "failed_by": by,
            "failed_phase": phase,
            "reconciled_by": reconciled_by,
        },
    )


def simulated(*, when: datetime = T0, audit_id: str = AUDIT) -> AuditFailureSimulated:
    return AuditFailureSimulated(
        **_envelope(when, None, audit_id),
        data={
            "error_code": "instance_lost",
            "error_detail": "Workflow instance was not found",
            "failed_by": "reconciler",
            "reconciled_by": "watchdog",
        },
    )


def observed(
    status: str,
    *,
    when: datetime = T0,
    instance: str | None = INSTANCE,
    error: Any = None,
    ended: datetime | None = None,
    trigger: str = "watchdog",
    event_id: uuid.UUID | None = None,
    causation_id: uuid.UUID | None = None,
    correlation_id: uuid.UUID | None = None,
    audit_id: str = AUDIT,
    sweep_size: int | None = None,
    source: str = "instance",
) -> WorkflowStatusObserved:
    return WorkflowStatusObserved(
        **_envelope(
            when,
            event_id,
            audit_id,
            causation_id=causation_id,
            correlation_id=correlation_id,
        ),
        data={
            "workflow_instance_id": instance,
            "status": status,
            "error": error,
            "workflow_ended_at": ended,
            "trigger": trigger,
            "observed_at": when,
            "sweep_id": "sweep-1" if sweep_size is not None else None,
            "sweep_size": sweep_size,
            "source": source,
        },
    )


def probe_failed(
    *,
    when: datetime = T0,
    reason: str = "timeout",
    instance: str | None = INSTANCE,
    audit_id: str = AUDIT,
) -> WorkflowProbeFailed:
    return WorkflowProbeFailed(
        **_envelope(when, None, audit_id),
        data={
            "workflow_instance_id": instance,
            "reason": reason,
            "detail": "probe gave up",
            "trigger": "watchdog",
            "observed_at": when,
        },
    )


def state_of(*events: AuditEvent) -> AuditState:
    state = fold(events)
    assert state is not None
    return state


def running(*, instance: str | None = INSTANCE, phase: str = "crawl") -> AuditState:
    """An audit started at ``T0``, attached to ``instance``, in ``phase``, 3/10 pages."""
    return state_of(
        started(instance=instance, pages_total=10),
        progressed(when=at(1), phase=phase, crawled=3),
    )


TERMINAL_HISTORIES: dict[str, tuple[AuditEvent, ...]] = {
    "completed": (started(), completed(when=at(5), crawled=10, total=10)),
    "failed_by_workflow": (started(), failed(when=at(5), by="workflow", code="oom")),
    "failed_by_operator": (started(), failed(when=at(5), by="operator", code="unknown")),
    "failed_by_reconciler": (
        started(),
        failed(when=at(5), by="reconciler", code="instance_lost", reconciled_by="watchdog"),
    ),
    "completed_after_overturn": (
        started(),
        failed(when=at(5), by="reconciler", code="finalize_lost", reconciled_by="watchdog"),
        completed(when=at(6)),
    ),
}
