"""The Python client checks an outcome webhook's Standard Webhooks signature, as signed by the
official ``standardwebhooks`` package, and reads the outcome it carries."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from standardwebhooks import Webhook

from auditrec_client import OUTCOME_TYPES, Outcome, WebhookRefused, verify_webhook
from statemachine import outcomes

SECRET = "whsec_" + base64.b64encode(b"a secret of thirty-two bytes....").decode()
OUTCOME: dict[str, Any] = {
    "id": "out_5f0c0d0e",
    "type": "audit.failed",
    "audit_id": "a-1",
    "status": "failed",
    "error_code": "oom",
    "rule": "errored",
    "reconciled_by": "subscription",
    "actor": "reconciler",
    "decided_at": "2026-12-06T10:00:01.500000+00:00",
    "event_id": "2d1f0a4e-6f6e-4c39-9a1b-2d3c4e5f6a7b",
}


def signed(
    body: str, *, secret: str = SECRET, at: datetime | None = None, msg_id: str = "out_5f0c0d0e"
) -> dict[str, str]:
    at = at or datetime.now(UTC)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, at, body),
    }


def test_a_signed_outcome_is_read_back_whole() -> None:
    body = json.dumps(OUTCOME)

    outcome = verify_webhook(body.encode(), signed(body), SECRET)

    assert outcome == Outcome(
        id="out_5f0c0d0e",
        type="audit.failed",
        audit_id="a-1",
        status="failed",
        decided_at=datetime(2026, 12, 6, 10, 0, 1, 500000, tzinfo=UTC),
        event_id=OUTCOME["event_id"],
        error_code="oom",
        rule="errored",
        reconciled_by="subscription",
        actor="reconciler",
    )


def test_headers_are_matched_whatever_their_case_and_any_one_signature_may_match() -> None:
    body = json.dumps(OUTCOME)
    headers = {k.title(): v for k, v in signed(body).items()}
    other = Webhook("whsec_" + base64.b64encode(b"another key").decode()).sign(
        "out_5f0c0d0e", datetime.now(UTC), body
    )
    headers["Webhook-Signature"] = f"{other} {headers['Webhook-Signature']}"
    assert verify_webhook(body, headers, SECRET).audit_id == "a-1"


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ("tampered", "No matching signature"),
        ("other secret", "No matching signature"),
        ("old", "too old"),
        ("ahead", "too new"),
        ("no signature", "Missing required headers"),
    ],
)
def test_a_delivery_that_is_not_auditrecs_is_refused(change: str, why: str) -> None:
    body = json.dumps(OUTCOME)
    headers = signed(body)
    if change == "tampered":
        body = body.replace('"oom"', '"unknown"')
    elif change == "other secret":
        headers = signed(body, secret="whsec_" + base64.b64encode(b"not the secret").decode())
    elif change == "old":
        headers = signed(body, at=datetime.now(UTC) - timedelta(minutes=6))
    elif change == "ahead":
        headers = signed(body, at=datetime.now(UTC) + timedelta(minutes=6))
    else:
        del headers["webhook-signature"]

    with pytest.raises(WebhookRefused, match=why):
        verify_webhook(body, headers, SECRET)


@pytest.mark.parametrize(
    ("outcome", "why"),
    [
        ({**OUTCOME, "type": "audit.exploded"}, "unknown outcome type 'audit.exploded'"),
        ({k: v for k, v in OUTCOME.items() if k != "audit_id"}, "lacks audit_id"),
        ({**OUTCOME, "decided_at": "yesterday"}, "decided_at 'yesterday' is no timestamp"),
        ([OUTCOME], "not an outcome"),
    ],
)
def test_a_signed_body_that_is_no_outcome_is_refused_naming_why(outcome: Any, why: str) -> None:
    body = json.dumps(outcome)
    with pytest.raises(WebhookRefused, match=why):
        verify_webhook(body, signed(body), SECRET)


def test_an_empty_secret_is_the_receivers_mistake_not_a_refusal() -> None:
    body = json.dumps(OUTCOME)
    with pytest.raises(ValueError, match="not a Standard Webhooks secret"):
        verify_webhook(body, signed(body), "")


def test_the_clients_outcome_types_are_the_services() -> None:
    assert OUTCOME_TYPES == outcomes.OUTCOME_TYPES
