"""A client for auditrec's HTTP API: publish audit lifecycle events (with retries that never
duplicate an event), read an audit's status, list audits, and replay an audit's history.

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

__all__ = [
    "ERROR_CODES",
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
    "InvalidEvents",
    "NotFound",
    "Retry",
    "Unauthorized",
    "Unavailable",
    "Unreachable",
    "WorkflowInstanceAttached",
]
