"""What a message of the Workflows event subscription says: which instance of which workflow
changed to what, and when.

A message body (JSON, ``metadata["CF-Content-Type"]`` ``json``, or ``text``/``bytes``
holding JSON)::

    {"type": "cf.workflows.workflow.instance.errored",
     "source": {"type": "workflows.workflow", "workflowName": "site-audit"},
     "payload": {"versionId": "v1", "instanceId": "wf-123"},
     "metadata": {"accountId": "…", "eventSubscriptionId": "…", "eventSchemaVersion": 1,
                  "eventTimestamp": "2026-12-06T02:48:57.132Z"}}

:func:`read_report` gives a :class:`Report` or raises :class:`Unreadable` naming what is wrong.
A report's :attr:`Report.key` is its content (workflow, instance, event, time), so a message
delivered twice, or sent twice under two ids, derives the same events.
"""

from __future__ import annotations

import binascii
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from pydantic import ValidationError

from consumers.workflows.queues import QueueMessage, message_text
from statemachine.events import Notice

__all__ = ["ALIVE", "ENDED", "EVENT_PREFIX", "Report", "Unreadable", "read_report"]

EVENT_PREFIX: Final = "cf.workflows.workflow.instance."
# An instance that ended: the probe confirms it with one request before anything is decided.
ENDED: Final = frozenset({"errored", "terminated", "completed"})
# An instance alive: observed from the message alone, as the status the API would answer.
ALIVE: Final = {"queued": "queued", "started": "running", "paused": "paused"}


class Unreadable(ValueError):
    """A message that says nothing auditrec can use; the reason is the message."""


@dataclass(frozen=True, slots=True)
class Report:
    event: str  # the type without its prefix: errored, started, ...
    workflow: str
    instance_id: str
    at: datetime  # when the status changed
    notice: Notice

    @property
    def key(self) -> str:
        return f"{self.workflow}/{self.instance_id}/{self.event}/{self.at.isoformat()}"


def read_report(message: QueueMessage) -> Report:
    try:
        doc = json.loads(message_text(message))
    except (ValueError, binascii.Error, RecursionError) as exc:
        raise Unreadable(f"not JSON: {str(exc)[:200]}") from None
    if not isinstance(doc, dict):
        raise Unreadable("not a JSON object")
    kind = doc.get("type")
    if not isinstance(kind, str) or not kind.startswith(EVENT_PREFIX):
        raise Unreadable(f"type {str(kind)[:80]!r} is not a Workflows instance event")
    event = kind.removeprefix(EVENT_PREFIX)
    if event not in ENDED and event not in ALIVE:
        raise Unreadable(f"unknown instance event {event[:40]!r}")
    workflow = _text(doc, "source", "workflowName")
    instance = _text(doc, "payload", "instanceId")
    stamp = _text(doc, "metadata", "eventTimestamp")
    try:
        at = datetime.fromisoformat(stamp)
    except ValueError:
        raise Unreadable(f"metadata.eventTimestamp {stamp[:40]!r} is not a timestamp") from None
    if at.tzinfo is None:
        raise Unreadable(f"metadata.eventTimestamp {stamp[:40]!r} has no offset")
    if len(instance) > 256 or len(workflow) > 256:
        raise Unreadable("instance id or workflow name longer than 256 characters")
    try:
        notice = Notice(message_id=message.id[:128], event=kind, at=at)
    except ValidationError as exc:  # e.g. a timestamp out of any sane range
        why = exc.errors()[0]["msg"] if exc.errors() else "invalid"
        raise Unreadable(f"metadata.eventTimestamp {stamp[:40]!r}: {why}") from None
    return Report(event, workflow, instance, at, notice)


def _text(doc: dict[str, object], part: str, name: str) -> str:
    inner = doc.get(part)
    value = inner.get(name) if isinstance(inner, dict) else None
    if not isinstance(value, str) or not value:
        raise Unreadable(f"{part}.{name} is missing or not a string")
    return value
