"""Webhook receivers in the Workflows simulator: named endpoints that take the outcome feed's
deliveries over real HTTP, check their Standard Webhooks signature (the official
``standardwebhooks`` package) when they have a secret, answer with injected faults, and keep
what they received; thread-safe behind one lock.

A delivery is recorded as it arrives, whatever it is answered: a receiver that is ``down``, or
has ``fail`` answers left, answers ``status``; else a signed receiver answers 401 to a bad
signature, a missing header or a timestamp more than five minutes off (``refused``), and
anything else 204 (``accepted``). A ``delay`` is slept after recording, before answering.
:mod:`.server` documents the HTTP side; the bodies are in :mod:`.bodies`.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from consumers.workflows.simulator.bodies import WebhookBody, WebhookFaultsBody, iso

__all__ = ["Answer", "ReceiverNotFound", "Receivers"]

ACCEPTED = 204
REFUSED = 401


class ReceiverNotFound(KeyError):
    """No webhook receiver has this name."""


@dataclass(frozen=True, slots=True)
class Answer:
    """What a delivery is answered, after ``delay`` seconds."""

    status: int
    delay: float


@dataclass
class _Receiver:
    webhook: Webhook | None
    faults: WebhookFaultsBody
    fail_left: int
    deliveries: list[dict[str, Any]] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    accepted_ids: set[str] = field(default_factory=set)


class Receivers:
    """Every webhook receiver of the simulator by name."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._receivers: dict[str, _Receiver] = {}

    def put(self, name: str, config: WebhookBody) -> dict[str, Any]:
        """Create or replace a receiver (with nothing received); its state."""
        if not name:
            raise ValueError("a receiver's name must be non-empty")
        webhook = Webhook(config.secret) if config.secret else None
        faults = WebhookFaultsBody.model_validate(
            config.model_dump(include=set(WebhookFaultsBody.model_fields))
        )
        with self._lock:
            r = _Receiver(webhook, faults, faults.fail)
            self._receivers[name] = r
            return _state(r)

    def set_faults(self, name: str, faults: WebhookFaultsBody) -> dict[str, Any]:
        """Change a receiver's faults, keeping what it received; its state."""
        with self._lock:
            r = self._get(name)
            r.faults, r.fail_left = faults, faults.fail
            return _state(r)

    def get(self, name: str) -> dict[str, Any]:
        with self._lock:
            return _state(self._get(name))

    def delete(self, name: str) -> bool:
        with self._lock:
            return self._receivers.pop(name, None) is not None

    def clear(self) -> None:
        with self._lock:
            self._receivers.clear()

    def names(self) -> list[str]:
        with self._lock:
            return list(self._receivers)

    def deliver(self, name: str, raw: bytes, headers: Mapping[str, str]) -> Answer:
        """Record a delivery to ``name`` and decide its answer; :class:`ReceiverNotFound`
        for an unknown receiver."""
        headers = {k.lower(): v for k, v in headers.items()}
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = None
        with self._lock:
            r = self._get(name)
            verified = _verified(r.webhook, raw, headers)
            if r.faults.down:
                status, result = r.faults.status, "failed"
            elif r.fail_left > 0:
                r.fail_left -= 1
                status, result = r.faults.status, "failed"
            elif r.webhook is not None and not verified:
                status, result = REFUSED, "refused"
            else:
                status, result = ACCEPTED, "accepted"
            msg_id = headers.get("webhook-id")
            if result == "accepted" and msg_id:
                r.accepted_ids.add(msg_id)
            r.counts["received"] += 1
            r.counts[result] += 1
            r.deliveries.append({
                "id": msg_id, "timestamp": headers.get("webhook-timestamp"),
                "signature": headers.get("webhook-signature"), "body": body,
                "raw": raw.decode("utf-8", "replace"), "verified": verified, "status": status,
                "received_at": iso(datetime.now(UTC)),
            })  # fmt: skip
            return Answer(status, r.faults.delay)

    def _get(self, name: str) -> _Receiver:
        r = self._receivers.get(name)
        if r is None:
            raise ReceiverNotFound(name)
        return r


def _verified(webhook: Webhook | None, raw: bytes, headers: dict[str, str]) -> bool:
    if webhook is None:
        return False
    try:
        webhook.verify(raw, headers, json_parse=False)
    except (WebhookVerificationError, ValueError):
        return False
    return True


def _state(r: _Receiver) -> dict[str, Any]:
    return {
        "deliveries": list(r.deliveries), "received": r.counts["received"],
        "accepted": r.counts["accepted"], "unique": len(r.accepted_ids),
        "refused": r.counts["refused"], "failed": r.counts["failed"],
        "signed": r.webhook is not None, "faults": r.faults.model_dump(),
        "fail_left": r.fail_left,
    }  # fmt: skip
