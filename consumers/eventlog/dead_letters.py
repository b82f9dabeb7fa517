"""The dead-letter topic read back: dead letters (:func:`consumers.eventlog.codec.dead_letter`)
and the replay marks that say one was replayed.

A dead letter's position (``partition:offset`` on the dead-letter topic) is how an operator
names it. A replay is recorded on the same topic, under the same key (so in the same partition,
after the dead letter) as a *replay mark*: a record with the ``replay-of`` header naming the
original record's position, not the dead letter's. Several consumers may set aside the same
record (projector, reconciler and telemetry all read the lifecycle topic); keyed by the
original, a record is replayed once however many dead letters it left.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from consumers.eventlog.port import OutRecord, Record
from statemachine.errors import InvalidInput

__all__ = [
    "REPLAY_HEADER",
    "DeadLetter",
    "ReplayMark",
    "format_position",
    "parse_position",
    "read_dead_letter",
    "read_replay_mark",
    "replay_mark",
]

REPLAY_HEADER = "replay-of"

Origin = tuple[str, int, int]  # the original record's topic, partition, offset


def format_position(partition: int, offset: int) -> str:
    return f"{partition}:{offset}"


def parse_position(text: str) -> tuple[int, int]:
    """``partition:offset``, or a bare offset for partition 0 (the embedded log has one)."""
    head, sep, tail = text.strip().partition(":")
    parts = (head, tail) if sep else ("0", head)
    if not all(p.isdigit() for p in parts):
        raise InvalidInput(
            f"invalid dead-letter position {text!r}: expected PARTITION:OFFSET (e.g. 0:12), "
            "as `auditrec dead-letters list` shows"
        )
    return int(parts[0]), int(parts[1])


def _iso(ms: int) -> str:
    when = datetime.fromtimestamp(ms / 1000, UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A dead letter as read back: where it sits, and what it holds."""

    partition: int
    offset: int
    timestamp_ms: int
    key: str | None
    consumer: str
    reason: str
    origin: Origin | None
    original: bytes
    original_size: int
    truncated: bool

    @property
    def position(self) -> str:
        return format_position(self.partition, self.offset)

    @property
    def at(self) -> str:
        return _iso(self.timestamp_ms)

    def origin_text(self) -> str:
        if self.origin is None:
            return "unknown"
        topic, partition, offset = self.origin
        return f"{topic}/{partition}@{offset}"

    def original_text(self) -> tuple[str, str]:
        """The original bytes as ``("text", …)`` when UTF-8, else ``("base64", …)``."""
        try:
            return "text", self.original.decode()
        except UnicodeDecodeError:
            return "base64", base64.b64encode(self.original).decode()


@dataclass(frozen=True, slots=True)
class ReplayMark:
    """A replay recorded on the dead-letter topic: of which original record, from which dead
    letter, as which event, by whom and when."""

    origin: Origin
    dead_letter: str
    event_id: str
    topic: str
    actor: str
    at: str
    corrected: bool
    mark_position: str = ""


def _body(record: Record) -> dict[str, Any] | None:
    try:
        body = json.loads(record.value)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    return body if isinstance(body, dict) else None


def _origin(body: dict[str, Any]) -> Origin | None:
    topic, partition, offset = (body.get(k) for k in ("topic", "partition", "offset"))
    if not isinstance(topic, str) or not isinstance(partition, int):
        return None
    if not isinstance(offset, int) or isinstance(partition, bool) or isinstance(offset, bool):
        return None
    return topic, partition, offset


def read_dead_letter(record: Record) -> DeadLetter | None:
    """The dead letter a record of the dead-letter topic holds; ``None`` for a replay mark or
    a record that is no dead letter (the topic is open to anyone who can write to it)."""
    if any(name == REPLAY_HEADER for name, _ in record.headers):
        return None
    body = _body(record)
    if body is None or "error" not in body:
        return None
    original: bytes
    if isinstance(body.get("original"), str):
        original = body["original"].encode()
    elif isinstance(body.get("original_base64"), str):
        try:
            original = base64.b64decode(body["original_base64"], validate=True)
        except ValueError:
            original = b""
    else:
        original = b""
    origin = _origin(
        {
            "topic": body.get("source_topic"),
            "partition": body.get("source_partition"),
            "offset": body.get("source_offset"),
        }
    )
    size = body.get("original_size")
    return DeadLetter(
        partition=record.partition,
        offset=record.offset,
        timestamp_ms=record.timestamp_ms,
        key=record.key,
        consumer=str(body.get("consumer") or dict(record.headers).get("consumer", b"").decode()),
        reason=str(body.get("error")),
        origin=origin,
        original=original,
        original_size=size if isinstance(size, int) else len(original),
        truncated=body.get("original_truncated") is True,
    )


def read_replay_mark(record: Record) -> ReplayMark | None:
    """The replay mark a record holds, if it is one."""
    if not any(name == REPLAY_HEADER for name, _ in record.headers):
        return None
    body = _body(record)
    if body is None:
        return None
    origin = _origin(body.get("origin") or {})
    if origin is None:
        return None
    return ReplayMark(
        origin=origin,
        dead_letter=str(body.get("dead_letter")),
        event_id=str(body.get("event_id")),
        topic=str(body.get("replayed_to")),
        actor=str(body.get("actor")),
        at=str(body.get("at")),
        corrected=body.get("corrected") is True,
        mark_position=format_position(record.partition, record.offset),
    )


def replay_mark(
    dead_letter_topic: str,
    letter: DeadLetter,
    event_id: str,
    replayed_to: str,
    actor: str,
    at: datetime,
    *,
    corrected: bool,
) -> OutRecord:
    """The record that marks ``letter``'s original as replayed (keyed as the dead letter, so
    it lands in its partition)."""
    assert letter.origin is not None
    topic, partition, offset = letter.origin
    body = {
        "origin": {"topic": topic, "partition": partition, "offset": offset},
        "dead_letter": letter.position,
        "event_id": event_id,
        "replayed_to": replayed_to,
        "actor": actor,
        "at": at.isoformat().replace("+00:00", "Z"),
        "corrected": corrected,
    }
    key = letter.key or f"{topic}:{partition}:{offset}"
    header = f"{topic}/{partition}@{offset}".encode()
    return OutRecord(dead_letter_topic, key, json.dumps(body).encode(), ((REPLAY_HEADER, header),))
