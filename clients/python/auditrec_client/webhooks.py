"""Receiving auditrec's outcome feed by webhook: check a delivery's Standard Webhooks signature
(``webhook-id``, ``webhook-timestamp``, ``webhook-signature``; HMAC-SHA256 with the shared
secret, by the official ``standardwebhooks`` package) and read the outcome it carries::

    from auditrec_client import WebhookRefused, verify_webhook

    try:
        outcome = verify_webhook(request.body, request.headers, secret)
    except WebhookRefused:
        return 401
    # outcome.id is the same on every delivery of one change: apply it once

A tampered body, another secret, a missing header, and a timestamp more than five minutes
old or ahead are refused, as is a body that is no outcome.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from auditrec_client.errors import AuditrecClientError

__all__ = ["OUTCOME_TYPES", "Outcome", "WebhookRefused", "verify_webhook"]

# The types of outcome auditrec sends (its statemachine/outcomes.py).
OUTCOME_TYPES: Final[tuple[str, ...]] = (
    "audit.failed",
    "audit.completed",
    "audit.overturned",
    "audit.restored",
    "audit.failure_held",
    "audit.failure_released",
    "audit.failure_discarded",
)


_REQUIRED: Final = ("id", "type", "audit_id", "status", "decided_at", "event_id")


class WebhookRefused(AuditrecClientError):
    """The delivery is not auditrec's, or not an outcome: answer it with a 4xx."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """One change of an audit's status, as auditrec decided or recorded it."""

    id: str  # the same on every delivery of one change: deduplicate by it
    type: str  # one of OUTCOME_TYPES
    audit_id: str
    status: str  # the audit's status after the change
    decided_at: datetime
    event_id: str  # the causing event, in the audit's history
    error_code: str | None = None
    rule: str | None = None
    reconciled_by: str | None = None
    actor: str | None = None


def verify_webhook(body: bytes | str, headers: Mapping[str, str], secret: str) -> Outcome:
    """The outcome a delivery carries, once its signature is checked; else
    :class:`WebhookRefused` saying why."""
    try:
        webhook = Webhook(secret)
    except Exception as exc:  # an empty or malformed secret is the receiver's mistake
        raise ValueError(f"the webhook secret is not a Standard Webhooks secret: {exc}") from None
    try:
        data = webhook.verify(body, {str(k): str(v) for k, v in headers.items()})
    except WebhookVerificationError as exc:
        raise WebhookRefused(f"signature refused: {exc}") from None
    except (ValueError, TypeError) as exc:  # a body that is not JSON, a malformed header
        raise WebhookRefused(f"not a signed outcome: {exc}") from None
    return _outcome(data)


def _outcome(data: Any) -> Outcome:
    if not isinstance(data, dict):
        raise WebhookRefused("the body is not an outcome (a JSON object)")
    missing = [
        k for k in ("id", "type", "audit_id", "status", "decided_at", "event_id") if not data.get(k)
    ]
    if missing:
        raise WebhookRefused(f"the outcome lacks {', '.join(missing)}")
    if data["type"] not in OUTCOME_TYPES:
        raise WebhookRefused(f"unknown outcome type {str(data['type'])[:60]!r}")
    try:
        decided_at = datetime.fromisoformat(str(data["decided_at"]))
    except ValueError:
        raise WebhookRefused(
            f"decided_at {str(data['decided_at'])[:40]!r} is no timestamp"
        ) from None

    def text(key: str) -> str | None:
        value = data.get(key)
        return None if value is None else str(value)

    return Outcome(
        id=str(data["id"]),
        type=str(data["type"]),
        audit_id=str(data["audit_id"]),
        status=str(data["status"]),
        decided_at=decided_at,
        event_id=str(data["event_id"]),
        error_code=text("error_code"),
        rule=text("rule"),
        reconciled_by=text("reconciled_by"),
        actor=text("actor"),
    )
