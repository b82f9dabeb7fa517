"""What telemetry sends to PostHog, and the client that sends it.

For every reconciler failure reported (see :mod:`consumers.components.telemetry`)::

    capture("site_audit:complete", distinct_id=started_by_user_id,
            groups={"organization": organization_id},
            properties={audit_id, project_id, status: "failed", reconciled_by, error_code,
                        failed_phase, pages_crawled, pages_total},
            uuid=<the AuditFailed event_id>, timestamp=<its occurred_at>)

Without a ``started_by_user_id`` the audit id is the ``distinct_id`` and
``$process_person_profile`` is false, so no phantom person is created; without an
organization there is no ``groups``.

The client runs the SDK in ``sync_mode`` without retries of its own: ``capture`` returns the
event's uuid only once PostHog answered 200, and ``None`` when the request failed.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

from consumers.runtime.settings import Settings
from statemachine.errors import ConfigError
from statemachine.events import AuditFailed
from statemachine.state import AuditState

__all__ = ["EVENT_NAME", "build_client", "capture_arguments"]

EVENT_NAME = "site_audit:complete"


def capture_arguments(state: AuditState, event: AuditFailed) -> dict[str, Any]:
    """The keyword arguments of ``Posthog.capture`` for a reconciler failure of ``state``."""
    d = event.data
    properties: dict[str, Any] = {
        "audit_id": event.audit_id,
        "project_id": state.project_id,
        "status": "failed",
        "reconciled_by": d.reconciled_by.value if d.reconciled_by is not None else None,
        "error_code": d.error_code,
        "failed_phase": d.failed_phase if d.failed_phase is not None else state.current_phase,
        "pages_crawled": state.pages_crawled,
        "pages_total": state.pages_total,
    }
    distinct_id = state.started_by_user_id
    if not distinct_id:
        distinct_id = event.audit_id
        properties["$process_person_profile"] = False
    args: dict[str, Any] = {
        "distinct_id": distinct_id,
        "properties": properties,
        "uuid": str(event.event_id),
        "timestamp": event.occurred_at,
    }
    if state.organization_id:
        args["groups"] = {"organization": state.organization_id}
    return args


class _NoTraceback(logging.Filter):
    """The SDK logs every failed sync send with a traceback; we log the retry ourselves."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and "Error in capture" in record.getMessage()[:40]:
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def _quiet_sdk_errors() -> None:
    sdk = logging.getLogger("posthog")
    if not any(isinstance(f, _NoTraceback) for f in sdk.filters):
        sdk.addFilter(_NoTraceback())


def build_client(settings: Settings, *, timeout: float) -> Any:
    """A PostHog client that sends synchronously (``capture`` returns the uuid once PostHog
    answered 200) over the v0 ``/batch/`` protocol, whatever ``POSTHOG_CAPTURE_MODE`` says."""
    from posthog import Posthog

    if settings.posthog_api_key is None:
        raise ConfigError("AUDITREC_POSTHOG_API_KEY is not set: telemetry is off")
    options: dict[str, Any] = {
        "host": settings.posthog_host,
        "sync_mode": True,
        "timeout": timeout,
        "max_retries": 0,  # retried here, with backoff, without blocking the consumer
    }
    _quiet_sdk_errors()
    accepted = inspect.signature(Posthog.__init__).parameters
    if "capture_mode" in accepted:
        options["capture_mode"] = "v0"
    if "enable_local_evaluation" in accepted:
        options["enable_local_evaluation"] = False
    return Posthog(settings.posthog_api_key.get_secret_value(), **options)
