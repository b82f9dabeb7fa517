"""Validating what other services publish through auditrec (CLI ``publish``, ``POST /events``).

Everything is validated before anything is published: one invalid item rejects the whole
submission with a reason per item. ``event_id``, ``occurred_at``, ``schema_version`` and
``producer`` may be omitted and are filled in here, at the edge, where the clock and random ids
belong. What only auditrec writes is refused (:class:`~statemachine.errors.Refused`, HTTP 403)
by :func:`statemachine.admission.refusal`, the rule every door applies.

``(audit_id, event_id)`` is an idempotency key (:mod:`statemachine.idempotency`): an item that
repeats an earlier one's key and content is accepted and published once; one that gives the key
other content is refused (:class:`EventIdConflict`, HTTP 409), as is one whose key the history
already holds with other content (:func:`refuse_conflicts`, where the projection is at hand).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog
from pydantic import ValidationError

from consumers.eventlog.codec import describe
from projections.audits import AuditReads
from statemachine.admission import refusal
from statemachine.errors import EventIdConflict, InfrastructureError, InvalidInput, Refused
from statemachine.events import EVENT_ADAPTER, AuditEvent
from statemachine.idempotency import Key, key_of, same_content
from statemachine.upcasting import CURRENT_VERSION, upcast

__all__ = ["complete_envelope", "parse_json_lines", "refuse_conflicts", "validate_items"]

log = structlog.get_logger("auditrec.publishing")

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
        out["schema_version"] = CURRENT_VERSION.get(str(out.get("type")), 1)
    if out.get("producer") is None:
        out["producer"] = producer
    return out


def _validate(raw: Any, producer: str, actor: str | None) -> AuditEvent:
    if not isinstance(raw, dict):
        raise InvalidInput("expected a JSON object (an event envelope)")
    refused = refusal(raw, actor)
    if refused is not None:
        raise Refused(refused)
    try:
        return EVENT_ADAPTER.validate_python(upcast(complete_envelope(raw, producer=producer)))
    except ValidationError as exc:
        raise InvalidInput(describe(exc)) from None


@dataclass(frozen=True, slots=True)
class _Unparsable:
    reason: str


def _validate_all(
    entries: Iterable[tuple[str, Any]], *, kind: str, producer: str, actor: str | None
) -> list[AuditEvent]:
    """Validate ``(name, raw)`` entries; any problem rejects them all with :class:`InvalidInput`,
    one ``"{name}: reason"`` per problem, in order (:class:`Refused` when one of them is an
    event only auditrec writes, :class:`EventIdConflict` when every problem is an event id given
    other content). An entry repeating an earlier one (same key and content) is left out: it is
    published once."""
    problems: list[str] = []
    conflicts = 0
    refused = False
    events: list[AuditEvent] = []
    seen: dict[Key, tuple[str, AuditEvent]] = {}
    for name, raw in entries:
        if isinstance(raw, _Unparsable):
            problems.append(f"{name}: {raw.reason}")
            continue
        try:
            event = _validate(raw, producer, actor)
        except InvalidInput as exc:
            problems.append(f"{name}: {exc}")
            refused = refused or isinstance(exc, Refused)
            continue
        first_name, first = seen.setdefault(key_of(event), (name, event))
        if first is event:
            events.append(event)
        elif not same_content(first, event):
            conflicts += 1
            problems.append(f"{name}: {_conflict(event, first, first_name)}")
    if problems:
        shown = problems[:MAX_PROBLEMS]
        if len(problems) > MAX_PROBLEMS:
            shown.append(f"... and {len(problems) - MAX_PROBLEMS} more")
        if refused:
            raise Refused(f"{len(problems)} {kind}(s) refused or invalid; nothing published", shown)
        if conflicts == len(problems):
            raise EventIdConflict(f"{conflicts} event id conflict(s); nothing published", shown)
        raise InvalidInput(f"{len(problems)} invalid {kind}(s); nothing published", shown)
    return events


def _conflict(event: AuditEvent, first: AuditEvent, where: str) -> str:
    other = "data" if first.type == event.type else f"type ({first.type})"
    return (
        f"event_id {event.event_id} of audit {event.audit_id} already names an event with "
        f"other {other} ({where}); a new event needs a new event_id"
    )


async def refuse_conflicts(audits: AuditReads, events: Sequence[AuditEvent]) -> None:
    """Raise :class:`EventIdConflict` naming each of ``events`` whose key the history already
    holds with other content. The projection may lag the log: what it does not hold yet the
    projector judges (dead-lettered ``event_id_conflict``). A projection that cannot be read
    is left to the projector the same way, so a database that is down does not stop
    publishing."""
    try:
        recorded = await audits.recorded(events)
    except InfrastructureError as exc:
        log.warning("history unreadable; conflicts left to the projector", error=str(exc)[:300])
        return
    problems = [
        _conflict(event, first, "in the history")
        for event in events
        if (first := recorded.get(key_of(event))) is not None and not same_content(first, event)
    ]
    if problems:
        shown = problems[:MAX_PROBLEMS]
        if len(problems) > MAX_PROBLEMS:
            shown.append(f"... and {len(problems) - MAX_PROBLEMS} more")
        raise EventIdConflict(f"{len(problems)} event id conflict(s); nothing published", shown)


def validate_items(
    items: Sequence[Any],
    *,
    actor: str | None = None,
    label: str = "item",
    producer: str = "auditrec-api",
    base: int = 0,
) -> list[AuditEvent]:
    """Validate every item sent by ``actor`` (who authenticated; ``None``: no one did, and an
    item naming an actor is refused); raise :class:`InvalidInput` listing
    ``"{label} N: reason"``."""
    entries = ((f"{label} {index + base}", raw) for index, raw in enumerate(items))
    return _validate_all(entries, kind=label, producer=producer, actor=actor)


def parse_json_lines(
    lines: Iterable[str], *, actor: str | None = None, producer: str = "auditrec-publish"
) -> list[AuditEvent]:
    """JSON Lines sent by ``actor`` (``cli:<os user>``) → events. Blank lines and ``#``
    comments are skipped; line numbers are 1-based."""
    entries: list[tuple[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        raw: Any
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raw = _Unparsable(f"not valid JSON ({exc.msg} at column {exc.colno})")
        except RecursionError:
            raw = _Unparsable("not valid JSON (nested too deeply)")
        entries.append((f"line {number}", raw))
    return _validate_all(entries, kind="line", producer=producer, actor=actor)
