"""A client for auditrec's HTTP API: publish audit lifecycle events (with retries that never
duplicate an event), read an audit's status, list audits, and replay an audit's history; and
check the signature of an outcome auditrec pushes by webhook (:func:`verify_webhook`).

    from auditrec_client import AuditrecClient, AuditStarted

    with AuditrecClient("http://127.0.0.1:8080", token="...", producer="crawler") as client:
        client.publish(AuditStarted(audit_id="a-1", project_id="p-1"))
        client.status("a-1")
"""

from auditrec_client.aio import AsyncAuditrecClient
from auditrec_client.calls import AuditPage
from auditrec_client.errors import (
    ApiError,
    AuditrecClientError,
    Forbidden,
    InvalidEvents,
    NotFound,
    Unauthorized,
    Unavailable,
    Unreachable,
)
from auditrec_client.events import (
    ERROR_CODES,
    AuditCompleted,
    AuditFailed,
    AuditProgressed,
    AuditStarted,
    Event,
    WorkflowInstanceAttached,
)
from auditrec_client.retry import Retry
from auditrec_client.sync import AuditrecClient
from auditrec_client.webhooks import OUTCOME_TYPES, Outcome, WebhookRefused, verify_webhook

__all__ = [
    "ERROR_CODES",
    "OUTCOME_TYPES",
    "ApiError",
    "AsyncAuditrecClient",
    "AuditCompleted",
    "AuditFailed",
    "AuditPage",
    "AuditProgressed",
    "AuditStarted",
    "AuditrecClient",
    "AuditrecClientError",
    "Event",
    "Forbidden",
    "InvalidEvents",
    "NotFound",
    "Outcome",
    "Retry",
    "Unauthorized",
    "Unavailable",
    "Unreachable",
    "WebhookRefused",
    "WorkflowInstanceAttached",
    "verify_webhook",
]
