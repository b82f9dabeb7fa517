"""Dead letters as operators see them (``auditrec dead-letters``, ``/dead-letters``): list,
show, and replay a set-aside record to its original topic once it is valid (purging the old
ones: :mod:`consumers.operations.purging`).

One dead letter per source record: the log keeps one (:mod:`consumers.eventlog.letters`), and
what it holds besides (reason notes, and the one-per-consumer letters written before) is
merged by source position here, every consumer's reason on the one letter.

A replay validates with today's codec (upcasting applies): a record that now decodes is
published again; one that still fails is refused with the reason. It happens once per
original record, recorded as a replay mark on the dead-letter topic
(:mod:`consumers.eventlog.dead_letters`). The mark is appended after the event: a crash between
the two leaves no mark, and the next replay publishes again — the same event, with the same
``event_id`` (the original's, or one derived from the original's position when a corrected
body has none), which the projector's ``event_id`` dedupe and the reconciler's derived decision
ids absorb. A corrected body is a door like ``POST /events``: only what other services publish
is accepted, naming no actor but the one replaying (:func:`statemachine.admission.refusal`;
:class:`Refused` otherwise, HTTP 403), and, given the projection, no event id the history holds
with other content (:class:`~statemachine.errors.EventIdConflict`, HTTP 409). A
record of the ingest topic (a Kafka publisher's) is judged as the ingest component judges it,
and replayed to the lifecycle topic, where that component would have appended it.
"""

from __future__ import annotations

import heapq
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any, Literal, cast

import structlog
from pydantic import BaseModel

from consumers.components.ingest import admit
from consumers.eventlog.codec import decode, decode_probe, encode
from consumers.eventlog.dead_letters import (
    DeadLetter,
    ReplayMark,
    parse_position,
    read_dead_letter,
    read_reason_note,
    read_replay_mark,
    replay_mark,
)
from consumers.eventlog.port import EventLog, Record, Topics
from consumers.operations.publishing import complete_envelope, refuse_conflicts
from projections.audits import AuditReads
from statemachine.admission import refusal
from statemachine.errors import DecodeError, InvalidInput, NotFound, Refused
from statemachine.events import AuditEvent, derived_id

__all__ = [
    "MAX_LIMIT",
    "list_dead_letters",
    "replay_dead_letter",
    "show_dead_letter",
]

_logger = structlog.get_logger("auditrec")

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
        "reasons": [{"consumer": c, "reason": r} for c, r in letter.reasons],
        "key": letter.source_key,
        "original_size": letter.original_size,
        "original_truncated": letter.truncated,
        "replayed": _mark(mark),
    }


def _sort_key(letter: DeadLetter) -> tuple[int, int, int]:
    return (-letter.timestamp_ms, -letter.partition, -letter.offset)


class _Folded:
    """Dead letters folded by source position: the first letter of each, with the reasons of
    the reason notes and of later letters of the same record (written before letters were
    kept once), and the replay mark of each."""

    def __init__(self) -> None:
        self.letters: dict[Origin | str, DeadLetter] = {}
        self.reasons: defaultdict[Origin, list[tuple[str, str]]] = defaultdict(list)
        self.marks: dict[Origin, ReplayMark] = {}

    def add(self, record: Record) -> None:
        mark = read_replay_mark(record)
        if mark is not None:
            self.marks.setdefault(mark.origin, mark)
            return
        note = read_reason_note(record)
        if note is not None:
            self.reasons[note.origin].append((note.consumer, note.reason))
            return
        letter = read_dead_letter(record)
        if letter is None:
            return
        ident: Origin | str = letter.origin or letter.position
        held = self.letters.get(ident)
        if held is None:
            self.letters[ident] = letter
        elif letter.offset < held.offset:  # read backwards: the first letter comes last
            self.letters[ident] = letter.with_reasons(held.reasons)
        else:
            self.letters[ident] = held.with_reasons(letter.reasons)

    def merged(self, letter: DeadLetter) -> tuple[DeadLetter, ReplayMark | None]:
        if letter.origin is None:
            return letter, None
        return letter.with_reasons(self.reasons.get(letter.origin, ())), self.marks.get(
            letter.origin
        )

    def found(self, consumers: Names) -> list[tuple[DeadLetter, ReplayMark | None]]:
        pairs = [self.merged(letter) for letter in self.letters.values()]
        return [p for p in pairs if consumers is None or _by(p[0], consumers)]


Names = frozenset[str] | None  # the consumer groups asked for (None: every one)


def _by(letter: DeadLetter, consumers: frozenset[str]) -> bool:
    return any(c in consumers for c, _ in letter.reasons)


def _groups(log: EventLog, consumer: str | None) -> Names:
    """What ``--consumer``/``?consumer=`` names: a consumer group (``audits-projector``) or a
    component (``projector``, ``outcomes-webhook-1``), meaning its group here."""
    if consumer is None:
        return None
    return frozenset({consumer, log.topics.group(consumer)})


async def _newest(
    log: EventLog, topic: str, limit: int, consumer: Names
) -> list[tuple[DeadLetter, ReplayMark | None]]:
    """The newest ``limit`` dead letters (of ``consumer``) over all partitions: each
    partition is read backwards; the notes and the replay mark of a letter follow it in the
    partition, so they are seen before it."""
    found: list[tuple[DeadLetter, ReplayMark | None]] = []
    for partition in await log.inspection.partitions(topic):
        folded = _Folded()
        before: int | None = None
        while len(folded.found(consumer)) < limit:
            batch = await log.inspection.read_before(topic, partition, before, max(limit, 100))
            if not batch:
                break
            for record in batch:
                folded.add(record)
            before = batch[-1].offset
        found.extend(sorted(folded.found(consumer), key=lambda p: _sort_key(p[0]))[:limit])
    return heapq.nsmallest(limit, found, key=lambda pair: _sort_key(pair[0]))


async def _partition(log: EventLog, topic: str, partition: int) -> list[Record]:
    out: list[Record] = []
    async for batch in log.inspection.read(topic, partition, 0):
        out.extend(batch)
    return out


def _fold(records: Iterable[Record]) -> _Folded:
    folded = _Folded()
    for record in records:
        folded.add(record)
    return folded


async def _by_position(
    log: EventLog, topic: str, limit: int, consumer: Names
) -> list[tuple[DeadLetter, ReplayMark | None]]:
    """The first ``limit`` dead letters by position (partition, then offset): every record
    is read, so that notes and replay marks anywhere are known."""
    found: list[tuple[DeadLetter, ReplayMark | None]] = []
    for partition in await log.inspection.partitions(topic):
        found.extend(_fold(await _partition(log, topic, partition)).found(consumer))
        if len(found) >= limit:
            break
    return found[:limit]


def _check_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"invalid limit {limit}: between 1 and {MAX_LIMIT}")


async def list_dead_letters(
    log: EventLog, *, limit: int = 50, consumer: str | None = None, order: Order = "newest"
) -> dict[str, Any]:
    """One line's worth per dead letter: position, when, consumer, origin, reason, and
    whether (and how) its record was replayed. ``order``: ``newest`` first, or by
    ``position``. ``consumer``: only those set aside by this consumer group, or by this
    component's group (``projector`` for ``<group prefix>-projector``)."""
    _check_limit(limit)
    if order not in ("newest", "position"):
        raise InvalidInput(f"invalid order {order!r}: newest or position")
    topic = log.topics.dead_letter
    pick = _newest if order == "newest" else _by_position
    found = await pick(log, topic, limit, _groups(log, consumer))
    return {"order": order, "dead_letters": [_summary(letter, mark) for letter, mark in found]}


async def _find(log: EventLog, position: str) -> tuple[DeadLetter, ReplayMark | None]:
    """The dead letter at ``position``, with every reason for its original, and the
    original's replay mark, if any (the whole partition is read: a mark left by replaying
    another dead letter of the same original may lie anywhere in it)."""
    partition, offset = parse_position(position)
    topic = log.topics.dead_letter
    record = await log.inspection.record_at(topic, partition, offset)
    letter = read_dead_letter(record) if record is not None else None
    if letter is None:
        raise NotFound(f"no dead letter at {position} (see `auditrec dead-letters list`)")
    if letter.origin is None:
        return letter, None
    folded = _fold(await _partition(log, topic, partition))
    first = folded.letters.get(letter.origin, letter)
    return folded.merged(letter.with_reasons(first.reasons))


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


def _corrected(body: bytes, origin: Origin, actor: str) -> bytes:
    """A corrected body as JSON, judged as any door judges what ``actor`` sends
    (:func:`~statemachine.admission.refusal`), with what ``publish`` fills in when omitted
    (producer, time, version) and the event id derived from the original's position when it
    has none (so replaying it twice yields one event)."""
    try:
        raw = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise InvalidInput(f"the corrected body is not valid JSON: {exc}") from None
    if isinstance(raw, dict):
        refused = refusal(raw, actor)
        if refused is not None:
            raise Refused(f"the corrected body: {refused}")
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
    audits: AuditReads | None = None,
) -> dict[str, Any]:
    """Publish the dead letter's record (or the corrected ``body``) to its original topic,
    once. Refused (:class:`InvalidInput`) when it still does not decode, when only part of it
    was kept and no body is given, or when it came from a topic not of this log. Replaying
    an original already replayed publishes nothing and says when it was. With ``audits`` (the
    projection), a lifecycle event whose ``(audit_id, event_id)`` the history holds with other
    content is refused as ``POST /events`` refuses it (:class:`EventIdConflict`, HTTP 409)."""
    letter, mark = await _find(log, position)
    topics = log.topics
    origin = letter.origin
    if origin is not None and origin[0] == topics.ingest:
        return await _replay_ingested(log, letter, mark, actor, body, dry_run, now, audits)
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
    value = letter.original if body is None else _corrected(body, origin, actor)
    try:
        event = _decode_for(topics, origin, value)
    except DecodeError as exc:
        what = "the corrected body" if body is not None else f"dead letter {position}"
        raise InvalidInput(f"{what} still does not decode: {exc}") from None
    event_id = str(getattr(event, "event_id"))  # noqa: B009 - every envelope has one
    result.update(event_id=event_id, type=getattr(event, "type", None))
    if audits is not None and origin[0] == topics.lifecycle:
        await refuse_conflicts(audits, [cast("AuditEvent", event)])  # (decoded by `decode`)
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


async def _replay_ingested(
    log: EventLog,
    letter: DeadLetter,
    mark: ReplayMark | None,
    actor: str,
    body: bytes | None,
    dry_run: bool,
    now: datetime | None,
    audits: AuditReads | None,
) -> dict[str, Any]:
    """A dead letter of the ingest topic, replayed: judged and completed as the ingest
    component judges a record (:func:`~consumers.components.ingest.admit`, the event id derived
    from the original's position when none is given, so replaying it twice yields one event),
    then appended to the lifecycle topic, where the ingest component would have put it."""
    assert letter.origin is not None
    topic, partition, offset = letter.origin
    target = log.topics.lifecycle
    result: dict[str, Any] = {
        "position": letter.position,
        "origin": {"topic": topic, "partition": partition, "offset": offset},
        "dry_run": dry_run,
        "corrected": body is not None,
    }
    if mark is not None:
        return {**result, "published": False, "event_id": mark.event_id, "replayed": _mark(mark)}
    if body is None and letter.truncated:
        raise InvalidInput(
            f"dead letter {letter.position} keeps only the first {len(letter.original)} of "
            f"{letter.original_size} bytes: replay it with a corrected body (--body FILE)"
        )
    value = letter.original if body is None else body
    record = Record(topic, partition, offset, letter.key, value, (), letter.timestamp_ms)
    what = "the corrected body" if body is not None else f"dead letter {letter.position}"
    try:
        event = admit(record)
    except Refused as exc:
        raise Refused(f"{what}: {exc}".replace(": refused: ", ": ")) from None
    except InvalidInput as exc:
        raise InvalidInput(f"{what} still does not decode: {exc}") from None
    event_id = str(event.event_id)
    result.update(event_id=event_id, type=event.type)
    if audits is not None:
        await refuse_conflicts(audits, [event])
    if dry_run:
        return {**result, "published": False, "replayed": None}
    await log.append([encode(target, event)])
    at = now or datetime.now(UTC)
    corrected = body is not None
    await log.append(
        [
            replay_mark(
                log.topics.dead_letter, letter, event_id, target, actor, at, corrected=corrected
            )
        ]
    )
    record_mark = ReplayMark(
        origin=letter.origin,
        dead_letter=letter.position,
        event_id=event_id,
        topic=target,
        actor=actor,
        at=at.isoformat().replace("+00:00", "Z"),
        corrected=corrected,
    )
    return {**result, "published": True, "replayed": _mark(record_mark)}
