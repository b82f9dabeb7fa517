"""The idempotency key of an event: ``(audit_id, event_id)``.

An event id names one event of its audit. An audit lives in one log partition, so every
consumer reads an audit's events in the same order and judges a key alike:

- the same key with the same content (``type`` and ``data``) is a **duplicate**: applied once,
  whatever its ``occurred_at``, ``producer`` or ``schema_version`` say (a retried step that
  rebuilds its event with a new time publishes the same event again);
- the same key with other content is a **conflict**: the first content seen wins, the other is
  never applied (the API answers 409 when it can see the first; the projector dead-letters it
  with the reason :data:`CONFLICT`; the reconciler and telemetry pass it over);
- the same ``event_id`` under another audit is another event.

Content is compared as decoded events of the current schema version (older versions are
upcast first), so a duplicate published in an older version is still a duplicate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from statemachine.events import AuditEvent

__all__ = ["CONFLICT", "Judged", "Key", "conflict_reason", "judge", "key_of", "same_content"]

CONFLICT: Final = "event_id_conflict"
"""The reason code of an event refused because its key already names other content."""

Key = tuple[str, int]
"""``(audit_id, event_id as an integer)``."""


def key_of(event: AuditEvent) -> Key:
    return (event.audit_id, event.event_id.int)


def same_content(first: AuditEvent, other: AuditEvent) -> bool:
    """Whether ``other`` repeats ``first``: the same ``type`` and ``data`` (the envelope's
    times, producer and schema version aside)."""
    return first.type == other.type and first.data == other.data


def conflict_reason(event: AuditEvent, first: AuditEvent) -> str:
    """Why ``event`` is refused: its key already names ``first``, of other content."""
    other = "data" if first.type == event.type else f"type ({first.type})"
    return (
        f"{CONFLICT}: event_id {event.event_id} of audit {event.audit_id} already names an "
        f"event with other {other}; this {event.type} is not applied (the first content wins)"
    )


@dataclass(frozen=True, slots=True)
class Judged:
    """A sequence of events judged by key: the indexes of the ``fresh`` ones (each key's
    first, not recorded before), and the ``conflicts`` (index, and the event its key names)."""

    fresh: list[int] = field(default_factory=list)
    conflicts: list[tuple[int, AuditEvent]] = field(default_factory=list)


def judge(
    events: Iterable[AuditEvent],
    recorded: Mapping[Key, AuditEvent],
    model: Callable[[int], AuditEvent],
) -> Judged:
    """Judge ``events`` in order against the events ``recorded`` before (by key) and each
    other: every key's first unrecorded event is fresh; a later one with the same key is a
    duplicate (left out) or a conflict. ``model(i)`` is the ``i``-th event as a validated
    model, asked only for a repeated key (an event may be a lighter read-only view)."""
    judged = Judged()
    first: dict[Key, int] = {}
    for i, event in enumerate(events):
        key = (event.audit_id, event.event_id.int)
        earlier = first.get(key)
        if earlier is None and key not in recorded:
            first[key] = i
            judged.fresh.append(i)
            continue
        original = recorded[key] if earlier is None else model(earlier)
        if not same_content(original, model(i)):
            judged.conflicts.append((i, original))
    return judged
