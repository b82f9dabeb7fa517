"""The dead-letter topic read back: dead letters (:func:`consumers.eventlog.codec.dead_letter`),
the reason notes that add another consumer's reason to one, the replay marks that say one was
replayed and the purge marks that say which were purged; and :func:`settle`, what the log
appends when a consumer sets a record aside.

A dead letter's position (``partition:offset`` on the dead-letter topic) is how an operator
names it. Every record about one source record shares its key (the source position,
``topic:partition:offset``), so they sit in one partition, in the order they were written:

- the *dead letter*, written once per source record by the first consumer that sets it aside
  (header ``dead-letter-of``);
- a *reason note* (header ``reason-for``) per other consumer's reason: a consumer that sets
  aside a record already set aside, for a reason of its own not yet recorded (another
  consumer's in the same words included), adds a note rather than a second copy of the
  original; its reason recorded already adds nothing (:func:`settle`);
- a *replay mark* (header ``replay-of``) naming the original record's position: a record is
  replayed once.

Dead letters written before they were kept once (keyed by the audit id, one per consumer) read
back the same; the operations merge them by source position.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from consumers.eventlog.values import OutRecord, Record
from statemachine.errors import InvalidInput

__all__ = [
    "LETTER_HEADER",
    "NOTE_HEADER",
    "PURGE_HEADER",
    "REPLAY_HEADER",
    "DeadLetter",
    "ReasonNote",
    "ReplayMark",
    "format_position",
    "parse_position",
    "purge_mark",
    "read_dead_letter",
    "read_reason_note",
    "read_replay_mark",
    "reason_note",
    "replay_mark",
    "settle",
]

LETTER_HEADER = "dead-letter-of"
NOTE_HEADER = "reason-for"
REPLAY_HEADER = "replay-of"
PURGE_HEADER = "purge"
_MARKS = (NOTE_HEADER, REPLAY_HEADER, PURGE_HEADER)

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
    reasons: tuple[tuple[str, str], ...] = ()  # (consumer, reason), the first one first
    source_key: str | None = None  # the key of the record set aside (the audit id)

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

    def with_reasons(self, more: Iterable[tuple[str, str]]) -> DeadLetter:
        """This letter with ``more`` reasons (a consumer's reason already held is not added
        twice; another consumer's in the same words is)."""
        reasons = list(self.reasons)
        for given in more:
            if given not in reasons:
                reasons.append(given)
        return replace(self, reasons=tuple(reasons))


@dataclass(frozen=True, slots=True)
class ReasonNote:
    """Another consumer's reason for a record already set aside."""

    origin: Origin
    consumer: str
    reason: str


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


def _header(record: Record | OutRecord, name: str) -> bytes | None:
    return next((value for key, value in record.headers if key == name), None)


def _body(record: Record | OutRecord) -> dict[str, Any] | None:
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
    if any(name in _MARKS for name, _ in record.headers):
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
    consumer = str(body.get("consumer") or dict(record.headers).get("consumer", b"").decode())
    reason = str(body.get("error"))
    reasons = [(consumer, reason)]
    for item in body.get("reasons") or ():
        if isinstance(item, dict) and isinstance(item.get("error"), str):
            reasons.append((str(item.get("consumer")), item["error"]))
    source_key = body.get("key")
    letter = DeadLetter(
        partition=record.partition,
        offset=record.offset,
        timestamp_ms=record.timestamp_ms,
        key=record.key,
        consumer=consumer,
        reason=reason,
        origin=origin,
        original=original,
        original_size=size if isinstance(size, int) else len(original),
        truncated=body.get("original_truncated") is True,
        source_key=source_key if isinstance(source_key, str) else record.key,
    )
    return letter.with_reasons(reasons)


def reason_note(
    letter: OutRecord | Record, origin: Origin, consumer: str, reason: str
) -> OutRecord:
    """The note that adds ``consumer``'s ``reason`` to the dead letter of ``origin`` (keyed as
    the letter, so it lands in its partition, after it)."""
    topic, partition, offset = origin
    body = {
        "origin": {"topic": topic, "partition": partition, "offset": offset},
        "consumer": consumer,
        "error": reason,
    }
    header = f"{topic}/{partition}@{offset}".encode()
    return OutRecord(
        letter.topic, letter.key or "", json.dumps(body).encode(), ((NOTE_HEADER, header),)
    )


def read_reason_note(record: Record | OutRecord) -> ReasonNote | None:
    """The reason note a record holds, if it is one."""
    if _header(record, NOTE_HEADER) is None:
        return None
    body = _body(record)
    origin = _origin((body or {}).get("origin") or {})
    if body is None or origin is None or not isinstance(body.get("error"), str):
        return None
    return ReasonNote(origin, str(body.get("consumer")), body["error"])


def _letter_of(record: Record | OutRecord) -> tuple[Origin, list[tuple[str, str]]] | None:
    """The source position and reasons of a dead letter (as written, or as read back)."""
    if _header(record, LETTER_HEADER) is None and not isinstance(record, Record):
        return None
    as_read = (
        record
        if isinstance(record, Record)
        else Record(record.topic, 0, 0, record.key, record.value, record.headers)
    )
    letter = read_dead_letter(as_read)
    if letter is None or letter.origin is None:
        return None
    return letter.origin, list(letter.reasons)


def settle(held: Iterable[Record | OutRecord], letter: OutRecord) -> OutRecord | None:
    """What to append for ``letter`` (:func:`~consumers.eventlog.codec.dead_letter`), given
    ``held``: the records already under its key (its partition's records of that key, and what
    is about to be appended with it). ``letter`` itself when its source record has no dead
    letter yet; nothing when one exists and already holds this consumer's reason; else a
    reason note (another consumer's, the same words or not).

    A record that is no dead letter of ours (no ``dead-letter-of`` header) is appended as it
    is."""
    mine = _letter_of(letter)
    if mine is None:
        return letter
    origin, [(consumer, reason), *_] = mine
    lettered = False
    reasons: set[tuple[str, str]] = set()  # by consumer: several may give the same reason
    for record in held:
        note = read_reason_note(record)
        if note is not None:
            if note.origin == origin:
                reasons.add((note.consumer, note.reason))
            continue
        found = _letter_of(record)
        if found is not None and found[0] == origin:
            lettered = True
            reasons.update(found[1])
    if not lettered:
        return letter
    if (consumer, reason) in reasons:
        return None
    return reason_note(letter, origin, consumer, reason)


def read_replay_mark(record: Record) -> ReplayMark | None:
    """The replay mark a record holds, if it is one."""
    if _header(record, REPLAY_HEADER) is None:
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


def purge_mark(
    dead_letter_topic: str,
    partition: int,
    actor: str,
    at: datetime,
    older_than: str,
    cutoff: str,
    purged: dict[str, Any],
) -> OutRecord:
    """The record that says who purged which records of ``partition`` (``purged``: the offsets
    ``from``/``to``, the dead letters and records counted), when, and older than what:
    appended to that partition before the purge, so it outlives it."""
    body = {
        "actor": actor,
        "at": at.isoformat().replace("+00:00", "Z"),
        "older_than": older_than,
        "cutoff": cutoff,
        **purged,
    }
    return OutRecord(
        dead_letter_topic,
        "purge",
        json.dumps(body).encode(),
        ((PURGE_HEADER, actor.encode()),),
        partition=partition,
    )
