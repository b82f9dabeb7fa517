"""Validating what other services publish through auditrec (CLI ``publish``, ``POST /events``).

Everything is validated before anything is published: one invalid item rejects the whole
submission with a reason per item. ``event_id``, ``occurred_at``, ``schema_version`` and
``producer`` may be omitted and are filled in here, at the edge, where the clock and random ids
belong.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from consumers.eventlog.codec import describe
from statemachine.errors import InvalidInput
from statemachine.events import EVENT_ADAPTER, AuditEvent, upcast

__all__ = ["complete_envelope", "parse_json_lines", "validate_items"]

MAX_PROBLEMS = 50


def complete_envelope(
    raw: dict[str, Any],
    *,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    new_id: Callable[[], uuid.UUID] = uuid.uuid4,
    producer: str = "auditrec-publish",
) -> dict[str, Any]:
    """``raw`` with the omittable envelope fields filled in (a new dict)."""
    out = dict(raw)
    if out.get("event_id") is None:
        out["event_id"] = str(new_id())
    if out.get("occurred_at") is None:
        out["occurred_at"] = now().isoformat()
    if out.get("schema_version") is None:
        out["schema_version"] = 1
    if out.get("producer") is None:
        out["producer"] = producer
    return out


def _validate(raw: Any, producer: str) -> AuditEvent:
    if not isinstance(raw, dict):
        raise ValueError("expected a JSON object (an event envelope)")
    if raw.get("type") in ("ProbeRequested", "AuditFailureSimulated"):
        raise ValueError(f"type: {raw['type']} is written by auditrec itself, not published")
    data = raw.get("data")
    reserved = isinstance(data, dict) and data.get("failed_by") == "reconciler"
    if raw.get("type") == "AuditFailed" and reserved:
        raise ValueError(
            "data.failed_by: 'reconciler' is reserved for auditrec's reconciler "
            "(publish failures with failed_by 'workflow' or 'operator')"
        )
    try:
        return EVENT_ADAPTER.validate_python(upcast(complete_envelope(raw, producer=producer)))
    except ValidationError as exc:
        raise ValueError(describe(exc)) from None


def validate_items(
    items: Sequence[Any], *, label: str = "item", producer: str = "auditrec-api", base: int = 0
) -> list[AuditEvent]:
    """Validate every item; raise :class:`InvalidInput` listing ``"{label} N: reason"``."""
    events: list[AuditEvent] = []
    problems: list[str] = []
    for index, raw in enumerate(items):
        try:
            events.append(_validate(raw, producer))
        except ValueError as exc:
            problems.append(f"{label} {index + base}: {exc}")
    ids = [e.event_id for e in events]
    if len(set(ids)) != len(ids) and not problems:
        seen: set[uuid.UUID] = set()
        for index, event in enumerate(events):
            if event.event_id in seen:
                problems.append(f"{label} {index + base}: duplicate event_id {event.event_id}")
            seen.add(event.event_id)
    if problems:
        shown = problems[:MAX_PROBLEMS]
        if len(problems) > MAX_PROBLEMS:
            shown.append(f"... and {len(problems) - MAX_PROBLEMS} more")
        raise InvalidInput(f"{len(problems)} invalid {label}(s); nothing published", shown)
    return events


def parse_json_lines(
    lines: Iterable[str], *, producer: str = "auditrec-publish"
) -> list[AuditEvent]:
    """JSON Lines → events. Blank lines and ``#`` comments are skipped; line numbers are 1-based."""
    events: list[AuditEvent] = []
    problems: list[str] = []
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            problems.append(f"line {number}: not valid JSON ({exc.msg} at column {exc.colno})")
            continue
        try:
            events.append(_validate(raw, producer))
        except ValueError as exc:
            problems.append(f"line {number}: {exc}")
    if problems:
        shown = problems[:MAX_PROBLEMS]
        if len(problems) > MAX_PROBLEMS:
            shown.append(f"... and {len(problems) - MAX_PROBLEMS} more")
        raise InvalidInput(f"{len(problems)} invalid line(s); nothing published", shown)
    return events
