"""One example envelope per event type, every field set, so that each field of the published
schemas carries an example taken from a whole event (and the examples are checked against the
models and the schemas by the tests). A publisher's minimal example leaves out what auditrec
fills in (:data:`PUBLISH_EXAMPLES`).

A new event type needs an entry here: the schemas' tests name any type or field without one.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["EXAMPLES", "PUBLISH_EXAMPLES"]

_AUDIT = "a-123"
_INSTANCE = "wf-a-123"
_POLICY = {
    "stale_running_after_s": 900,
    "instance_lost_grace_s": 600,
    "finalize_grace_s": 600,
    "observed_status": "errored",
}
_DECISION = {
    "error_code": "oom",
    "error_detail": "Error: Exceeded Memory Limit",
    "failed_phase": "crawl",
    "failed_by": "reconciler",
    "reconciled_by": "watchdog",
    "workflow_status": "errored",
    "policy": _POLICY,
    "rule": "errored",
}


def _envelope(kind: str, data: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "event_id": extra.pop("event_id", "0b7e6a52-8d8e-4e0c-9a7b-3f1d2c4b5a69"),
        "type": kind,
        "schema_version": extra.pop("schema_version", 1),
        "audit_id": _AUDIT,
        "occurred_at": extra.pop("occurred_at", "2026-11-30T08:00:00Z"),
        "producer": extra.pop("producer", "crawler"),
        "causation_id": extra.pop("causation_id", "5d0f6a0e-2b1c-4c9e-8f3a-7e6d5c4b3a21"),
        "correlation_id": "9c8b7a6f-5e4d-4c3b-9a1f-0e9d8c7b6a54",
        "data": data,
    }


# Every field of every type set (the source of each field's example in the schemas).
EXAMPLES: Final[dict[str, dict[str, Any]]] = {
    "AuditStarted": _envelope(
        "AuditStarted",
        {
            "project_id": "p-1",
            "organization_id": "org-7",
            "started_by_user_id": "u-42",
            "start_url": "https://example.com/",
            "workflow_instance_id": _INSTANCE,
            "started_at": "2026-11-30T08:00:00Z",
            "current_phase": "discovery",
            "pages_total": 250,
            "workflow": "site-audit",
        },
        schema_version=2,
    ),
    "WorkflowInstanceAttached": _envelope(
        "WorkflowInstanceAttached", {"workflow_instance_id": _INSTANCE}
    ),
    "AuditProgressed": _envelope(
        "AuditProgressed", {"current_phase": "crawl", "pages_crawled": 120, "pages_total": 250}
    ),
    "AuditCompleted": _envelope(
        "AuditCompleted",
        {"pages_crawled": 250, "pages_total": 250, "completed_at": "2026-11-30T08:42:00Z"},
    ),
    # (an operator's failure names its `actor` and the person acted for; the rest of a decision
    # is the reconciler's)
    "AuditFailed": _envelope(
        "AuditFailed",
        {**_DECISION, "actor": "token:ops-team", "on_behalf_of": "alice"},
        schema_version=2,
        producer="reconciler",
    ),
    "AuditFailureSimulated": _envelope(
        "AuditFailureSimulated",
        {**_DECISION, "actor": "token:ops-team", "on_behalf_of": "alice"},
        schema_version=2,
        producer="reconciler",
    ),
    "AuditFailureHeld": _envelope(
        "AuditFailureHeld",
        {
            "decision": {
                **_DECISION,
                "error_code": "instance_lost",
                "rule": "instance_lost",
                "actor": "token:ops-team",
                "on_behalf_of": "alice",
            },
            "sweep_id": "sweep-2026-11-30T08:30:00Z",
            "reason": "the mass-failure brake is engaged",
        },
        producer="reconciler",
    ),
    "WorkflowTerminationRequested": _envelope(
        "WorkflowTerminationRequested",
        {
            "workflow_instance_id": "wf-7f3a",
            "workflow": "site-audit",
            "decision": {
                "error_code": "stalled",
                "error_detail": "No progress for 45m while the instance was running (step "
                "'fetch-sitemap', 7 attempt(s), retrying: Error: fetch failed)",
                "failed_phase": "crawl",
                "failed_by": "reconciler",
                "reconciled_by": "watchdog",
                "workflow_status": "running",
                "rule": "stalled",
                "policy": {"stalled_after_s": 2700.0, "stalled_action": "terminate"},
                "actor": "token:ops-team",
                "on_behalf_of": "alice",
            },
        },
        producer="auditrec-reconciler",
    ),
    "AuditFailureReleased": _envelope(
        "AuditFailureReleased",
        {
            "held_id": "3e2d1c0b-9a8f-4e7d-8c6b-5a4f3e2d1c0b",
            "actor": "token:ops-team",
            "reason": "the provider's outage is over; the instances are gone",
        },
        producer="auditrec-api",
    ),
    "AuditFailureDiscarded": _envelope(
        "AuditFailureDiscarded",
        {
            "held_id": "3e2d1c0b-9a8f-4e7d-8c6b-5a4f3e2d1c0b",
            "actor": "token:ops-team",
            "reason": "a provider-side blip: the instances are alive",
        },
        producer="auditrec-api",
    ),
    "AuditRestored": _envelope(
        "AuditRestored",
        {
            "reason": "the crawl was alive after all: its instance was renamed",
            "actor": "token:ops-team",
            "on_behalf_of": "alice",
            "failure_id": "7f6e5d4c-3b2a-4190-8f7e-6d5c4b3a2910",
            "failed_by": "reconciler",
            "error_code": "instance_lost",
            "resume": {
                "project_id": "p-1",
                "organization_id": "org-7",
                "started_by_user_id": "u-42",
                "start_url": "https://example.com/",
                "workflow_instance_id": _INSTANCE,
                "started_at": "2026-11-30T08:00:00Z",
                "current_phase": "crawl",
                "pages_total": 250,
                "workflow": "site-audit",
            },
            "pages_crawled": 120,
        },
        producer="auditrec-api",
    ),
    "WorkflowStatusObserved": _envelope(
        "WorkflowStatusObserved",
        {
            "workflow_instance_id": _INSTANCE,
            "status": "errored",
            "error": {"name": "Error", "message": "Exceeded Memory Limit"},
            "workflow_ended_at": "2026-11-30T08:20:00Z",
            "trigger": "watchdog",
            "observed_at": "2026-11-30T08:30:00Z",
            "sweep_id": "sweep-2026-11-30T08:30:00Z",
            "sweep_size": 12,
            "actor": "token:ops-team",
            "on_behalf_of": "alice",
            "source": "instance",
            "workflow": "site-audit",
            "progress": {
                "event_id": "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d",
                "recorded_at": "2026-11-30T07:40:00Z",
            },
            "step": {
                "name": "fetch-sitemap",
                "started_at": "2026-11-30T07:41:00Z",
                "attempts": 7,
                "retrying": True,
                "error": {"name": "Error", "message": "fetch failed"},
            },
            "terminate": True,
            "notice": {
                "message_id": "8a1e6f0b2c9d4e7fa1b2c3d4e5f60718",
                "event": "cf.workflows.workflow.instance.errored",
                "at": "2026-11-30T08:20:00Z",
            },
        },
        producer="probe",
    ),
    "WorkflowProbeFailed": _envelope(
        "WorkflowProbeFailed",
        {
            "workflow_instance_id": _INSTANCE,
            "reason": "rate_limited",
            "http_status": 429,
            "detail": "429 Too Many Requests; retry-after 30 s exceeds the caller's wait",
            "trigger": "on_demand",
            "observed_at": "2026-11-30T08:30:00Z",
            "sweep_id": "sweep-2026-11-30T08:30:00Z",
            "sweep_size": 12,
            "actor": "token:ops-team",
            "on_behalf_of": "alice",
        },
        producer="probe",
    ),
    "ProbeRequested": _envelope(
        "ProbeRequested",
        {
            "workflow_instance_id": _INSTANCE,
            "trigger": "watchdog",
            "sweep_id": "sweep-2026-11-30T08:30:00Z",
            "sweep_size": 12,
            "actor": "token:ops-team",
            "on_behalf_of": "alice",
            "answer_by": "2026-11-30T08:31:00Z",
            "listed": {"status": "running", "at": "2026-11-30T08:30:00Z"},
            "workflow": "site-audit",
            "progress": {
                "event_id": "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d",
                "recorded_at": "2026-11-30T07:40:00Z",
            },
            "terminate": True,
            "notice": {
                "message_id": "8a1e6f0b2c9d4e7fa1b2c3d4e5f60718",
                "event": "cf.workflows.workflow.instance.errored",
                "at": "2026-11-30T08:20:00Z",
            },
        },
        producer="watchdog",
    ),
}

# What publishers send through auditrec, the least first: auditrec fills in event_id,
# occurred_at, schema_version and producer (the "publish" variant of the schemas).
PUBLISH_EXAMPLES: Final[dict[str, list[dict[str, Any]]]] = {
    "AuditStarted": [
        {
            "type": "AuditStarted",
            "audit_id": _AUDIT,
            "data": {"project_id": "p-1", "workflow_instance_id": _INSTANCE},
        },
        EXAMPLES["AuditStarted"],
    ],
    "WorkflowInstanceAttached": [
        {
            "type": "WorkflowInstanceAttached",
            "audit_id": _AUDIT,
            "data": {"workflow_instance_id": _INSTANCE},
        },
        EXAMPLES["WorkflowInstanceAttached"],
    ],
    "AuditProgressed": [
        {
            "type": "AuditProgressed",
            "audit_id": _AUDIT,
            "data": {"current_phase": "crawl", "pages_crawled": 120},
        },
        EXAMPLES["AuditProgressed"],
    ],
    "AuditCompleted": [
        {"type": "AuditCompleted", "audit_id": _AUDIT, "data": {}},
        EXAMPLES["AuditCompleted"],
    ],
    # A publisher reports only the workflow's own failure: a reconciler's or an operator's is
    # auditrec's to write (statemachine.admission).
    "AuditFailed": [
        {
            "type": "AuditFailed",
            "audit_id": _AUDIT,
            "data": {
                "error_code": "step_timeout",
                "error_detail": "WorkflowTimeoutError: step crawl timed out",
                "failed_by": "workflow",
            },
        },
        {
            **EXAMPLES["AuditFailed"],
            "producer": "crawler-workflow",
            "data": {
                "error_code": "oom",
                "error_detail": "Error: Exceeded Memory Limit",
                "failed_phase": "crawl",
                "failed_by": "workflow",
            },
        },
    ],
}
