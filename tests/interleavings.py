"""Interleavings of two audits' events under three shared event ids, for the properties of the
idempotency key ``(audit_id, event_id)``: each step picks an audit, an id, a content (a start,
two different steps, a completion), a time and a producer, so a key comes again as a duplicate
(the same content, another time or producer) or a conflict (other content)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from statemachine.events import AuditEvent
from tests.contracts.projection_store import at, completed, progressed, started

__all__ = ["AUDITS", "IDS", "PRODUCERS", "event_of", "expected_of"]

AUDITS = ("a-1", "a-2")
IDS = tuple(uuid.UUID(int=n + 1) for n in range(3))  # shared by both audits on purpose
PRODUCERS = ("crawler", "retry")


def event_of(audit_id: str, n: int, content: int, minute: int, producer: str) -> AuditEvent:
    """Content 0-3: a start, two different steps, a completion."""
    when = at(minute)
    built: AuditEvent
    if content == 0:
        built = started(audit_id, when)
    elif content in (1, 2):
        built = progressed(audit_id, when, pages_crawled=content)
    else:
        built = completed(audit_id, when)
    return built.model_copy(update={"event_id": IDS[n], "producer": producer})


def expected_of(events: Sequence[AuditEvent]) -> tuple[list[AuditEvent], set[int]]:
    """The events applied (each key's first) and the indexes of the conflicts."""
    first: dict[tuple[str, uuid.UUID], AuditEvent] = {}
    applied: list[AuditEvent] = []
    conflicts: set[int] = set()
    for i, event in enumerate(events):
        key = (event.audit_id, event.event_id)
        seen = first.setdefault(key, event)
        if seen is event:
            applied.append(event)
        elif (seen.type, seen.data) != (event.type, event.data):
            conflicts.add(i)
    return applied, conflicts
