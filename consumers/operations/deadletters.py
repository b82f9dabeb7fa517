"""Dead letters as operators see them (``auditrec dead-letters``, ``/dead-letters``): list,
show, and replay a set-aside record to its original topic once it is valid.

A replay validates with today's codec (upcasting applies): a record that now decodes is
published again; one that still fails is refused with the reason. It happens once per
original record, recorded as a replay mark on the dead-letter topic
(:mod:`consumers.eventlog.dead_letters`). The mark is appended after the event: a crash between
the two leaves no mark, and the next replay publishes again — the same event, with the same
``event_id`` (the original's, or one derived from the original's position when a corrected
body has none), which the projector's ``event_id`` dedupe and the reconciler's derived decision
ids absorb.
"""

from __future__ import annotations

import heapq
import json
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel

from consumers.eventlog.codec import decode, decode_probe, encode
from consumers.eventlog.dead_letters import (
    DeadLetter,
    ReplayMark,
    parse_position,
    read_dead_letter,
    read_replay_mark,
    replay_mark,
)
from consumers.eventlog.port import EventLog, Record, Topics
from consumers.operations.publishing import complete_envelope
from statemachine.errors import DecodeError, InvalidInput, NotFound
from statemachine.events import derived_id

__all__ = ["MAX_LIMIT", "list_dead_letters", "replay_dead_letter", "show_dead_letter"]

MAX_LIMIT = 1000
PRODUCER = "auditrec-dead-letters"  # of a corrected body that names no producer
Order = Literal["newest", "position"]
Origin = tuple[str, int, int]


def _mark(mark: ReplayMark | None) -> dict[str, Any] | None:
    if mark is None:
        return None
    out = asdict(mark)
    topic, partition, offset = mark.origin
    out["origin"] = {"topic": topic, "partition": partition, "offset": offset}
    return out


def _summary(letter: DeadLetter, mark: ReplayMark | None) -> dict[str, Any]:
    topic, partition, offset = letter.origin or (None, None, None)
    return {
        "position": letter.position,
        "at": letter.at,
        "consumer": letter.consumer,
        "origin": {"topic": topic, "partition": partition, "offset": offset},
        "reason": letter.reason,
        "key": letter.key,
        "original_size": letter.original_size,
        "original_truncated": letter.truncated,
        "replayed": _mark(mark),
    }


def _sort_key(letter: DeadLetter) -> tuple[int, int, int]:
    return (-letter.timestamp_ms, -letter.partition, -letter.offset)


async def _newest(
    log: EventLog, topic: str, limit: int, consumer: str | None
) -> list[tuple[DeadLetter, ReplayMark | None]]:
    """The newest ``limit`` dead letters (of ``consumer``) over all partitions: each
    partition is read backwards; a replay mark follows its dead letter in the partition, so
    it is seen before it."""
    found: list[tuple[DeadLetter, ReplayMark | None]] = []
    for partition in await log.inspection.partitions(topic):
        marks: dict[Origin, ReplayMark] = {}
        mine: list[tuple[DeadLetter, ReplayMark | None]] = []
        before: int | None = None
        while len(mine) < limit:
            batch = await log.inspection.read_before(topic, partition, before, max(limit, 100))
            if not batch:
                break
            for record in batch:
                mark = read_replay_mark(record)
                if mark is not None:
                    marks.setdefault(mark.origin, mark)
                    continue
                letter = read_dead_letter(record)
                if letter is None or (consumer is not None and letter.consumer != consumer):
                    continue
                mine.append((letter, marks.get(letter.origin) if letter.origin else None))
            before = batch[-1].offset
        found.extend(mine[:limit])
    return heapq.nsmallest(limit, found, key=lambda pair: _sort_key(pair[0]))


async def _partition(log: EventLog, topic: str, partition: int) -> list[Record]:
    out: list[Record] = []
    async for batch in log.inspection.read(topic, partition, 0):
        out.extend(batch)
    return out


async def _by_position(
    log: EventLog, topic: str, limit: int, consumer: str | None
) -> list[tuple[DeadLetter, ReplayMark | None]]:
    """The first ``limit`` dead letters by position (partition, then offset): every record
    is read, so that replay marks anywhere are known."""
    found: list[tuple[DeadLetter, ReplayMark | None]] = []
    for partition in await log.inspection.partitions(topic):
        records = await _partition(log, topic, partition)
        marks = _marks(records)
        for record in records:
            letter = read_dead_letter(record)
            if letter is None or (consumer is not None and letter.consumer != consumer):
                continue
            found.append((letter, marks.get(letter.origin) if letter.origin else None))
            if len(found) >= limit:
                return found
    return found


def _marks(records: list[Record]) -> dict[Origin, ReplayMark]:
    marks: dict[Origin, ReplayMark] = {}
    for record in records:
        mark = read_replay_mark(record)
        if mark is not None:
            marks.setdefault(mark.origin, mark)
    return marks


def _check_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"invalid limit {limit}: between 1 and {MAX_LIMIT}")


async def list_dead_letters(
    log: EventLog, *, limit: int = 50, consumer: str | None = None, order: Order = "newest"
) -> dict[str, Any]:
    """One line's worth per dead letter: position, when, consumer, origin, reason, and
    whether (and how) its record was replayed. ``order``: ``newest`` first, or by
    ``position``."""
    _check_limit(limit)
    if order not in ("newest", "position"):
        raise InvalidInput(f"invalid order {order!r}: newest or position")
    topic = log.topics.dead_letter
    pick = _newest if order == "newest" else _by_position
    found = await pick(log, topic, limit, consumer)
    return {"order": order, "dead_letters": [_summary(letter, mark) for letter, mark in found]}


async def _find(log: EventLog, position: str) -> tuple[DeadLetter, ReplayMark | None]:
    """The dead letter at ``position`` and its original's replay mark, if any (the whole
    partition is read: a mark left by replaying another dead letter of the same original may
    lie anywhere in it)."""
    partition, offset = parse_position(position)
    topic = log.topics.dead_letter
    record = await log.inspection.record_at(topic, partition, offset)
    letter = read_dead_letter(record) if record is not None else None
    if letter is None:
        raise NotFound(f"no dead letter at {position} (see `auditrec dead-letters list`)")
    mark = None
    if letter.origin is not None:
        mark = _marks(await _partition(log, topic, partition)).get(letter.origin)
    return letter, mark


def _decode_for(topics: Topics, origin: Origin | None, value: bytes) -> BaseModel:
    """``value`` decoded for the topic it came from, or :class:`DecodeError` with why not."""
    if origin is not None and origin[0] == topics.probe_requests:
        return decode_probe(value)
    return decode(value)


async def show_dead_letter(log: EventLog, position: str) -> dict[str, Any]:
    """The dead letter: the reason, the original (as text when UTF-8, else base64), and the
    envelope it decodes to today, or why it still does not."""
    letter, mark = await _find(log, position)
    encoding, value = letter.original_text()
    decoded: dict[str, Any] | None = None
    error: str | None = None
    try:
        decoded = _decode_for(log.topics, letter.origin, letter.original).model_dump(mode="json")
    except DecodeError as exc:
        error = str(exc)
    if letter.truncated:
        error = f"only the first {len(letter.original)} of {letter.original_size} bytes kept"
        decoded = None
    return {
        **_summary(letter, mark),
        "original": {"encoding": encoding, "value": value},
        "decodes": decoded is not None,
        "decoded": decoded,
        "decode_error": error,
    }


def _corrected(body: bytes, origin: Origin) -> bytes:
    """A corrected body as JSON, with what ``publish`` fills in when omitted (producer,
    time, version) and the event id derived from the original's position when it has none
    (so replaying it twice yields one event)."""
    try:
        raw = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise InvalidInput(f"the corrected body is not valid JSON: {exc}") from None
    if isinstance(raw, dict):
        derived = derived_id("/".join(map(str, origin)), "dead-letter-replay")
        raw = complete_envelope(raw, new_id=lambda: derived, producer=PRODUCER)
    return json.dumps(raw).encode()


async def replay_dead_letter(
    log: EventLog,
    position: str,
    *,
    actor: str,
    body: bytes | None = None,
    dry_run: bool = False,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Publish the dead letter's record (or the corrected ``body``) to its original topic,
    once. Refused (:class:`InvalidInput`) when it still does not decode, when only part of it
    was kept and no body is given, or when it came from a topic not of this log. Replaying
    an original already replayed publishes nothing and says when it was."""
    letter, mark = await _find(log, position)
    topics = log.topics
    origin = letter.origin
    if origin is None or origin[0] not in (topics.lifecycle, topics.probe_requests):
        where = letter.origin_text()
        raise InvalidInput(f"dead letter {position} came from {where}: not a topic to replay to")
    result: dict[str, Any] = {
        "position": letter.position,
        "origin": {"topic": origin[0], "partition": origin[1], "offset": origin[2]},
        "dry_run": dry_run,
        "corrected": body is not None,
    }
    if mark is not None:
        return {**result, "published": False, "event_id": mark.event_id, "replayed": _mark(mark)}
    if body is None and letter.truncated:
        raise InvalidInput(
            f"dead letter {position} keeps only the first {len(letter.original)} of "
            f"{letter.original_size} bytes: replay it with a corrected body (--body FILE)"
        )
    value = letter.original if body is None else _corrected(body, origin)
    try:
        event = _decode_for(topics, origin, value)
    except DecodeError as exc:
        what = "the corrected body" if body is not None else f"dead letter {position}"
        raise InvalidInput(f"{what} still does not decode: {exc}") from None
    event_id = str(getattr(event, "event_id"))  # noqa: B009 - every envelope has one
    result.update(event_id=event_id, type=getattr(event, "type", None))
    if dry_run:
        return {**result, "published": False, "replayed": None}
    await log.append([encode(origin[0], event)])
    at = now or datetime.now(UTC)
    marked = replay_mark(
        topics.dead_letter, letter, event_id, origin[0], actor, at, corrected=body is not None
    )
    await log.append([marked])
    record = ReplayMark(
        origin=origin,
        dead_letter=letter.position,
        event_id=event_id,
        topic=origin[0],
        actor=actor,
        at=at.isoformat().replace("+00:00", "Z"),
        corrected=body is not None,
    )
    return {**result, "published": True, "replayed": _mark(record)}
