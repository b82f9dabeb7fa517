"""History rows (``audit_events``) in PostgreSQL's binary ``COPY`` format, encoded here.

Why not asyncpg's ``copy_records_to_table``: it encodes each value through its generic codecs,
and a ``timestamptz`` alone costs it ~2.5 µs (two comparisons with infinity, ``astimezone``, a
``timedelta``), two per row; a ``uuid.UUID`` goes through ``.bytes`` and a ``bytea`` codec; the
body has to be a ``str`` (decoded from the record's bytes, encoded again). The history's ten
columns are fixed, so each row is a few ``struct`` packs and the record's own body bytes: about
half the client's cost per event. The batch's constant values (``recorded_at``, the topic) are
encoded once, and an audit id once per batch.

The format: a signature and two zero words, then per row the field count and each field as a
length (``-1``: NULL) and its binary value, then ``-1``
(https://www.postgresql.org/docs/current/sql-copy.html#id-1.9.3.55.9.4). Text is UTF-8 (the
connection's client encoding), a ``json`` value is its text, a ``jsonb`` value is a version
byte (1) and its text, a ``timestamptz`` microseconds since 2000-01-01 UTC.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Final

from projections.values import Position
from statemachine.events import AuditEvent

__all__ = ["COLUMNS", "HistoryEncoder", "encode_all"]

# Fixed-size fields first: one ``struct`` pack writes them all.
COLUMNS: Final = (
    "event_id",
    "occurred_at",
    "partition",
    "offset",
    "recorded_at",
    "audit_id",
    "type",
    "topic",
    "causation_id",
    "body",
)
_SIGNATURE: Final = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # no flags, no header extension
_TRAILER: Final = b"\xff\xff"
_NULL: Final = b"\xff\xff\xff\xff"
# field count; event_id, occurred_at, partition, offset, recorded_at (each length, value)
_fixed = struct.Struct(">h i16s iq ii iq iq").pack
_length = struct.Struct(">i").pack
_uuid = struct.Struct(">i16s").pack
_EPOCH: Final = datetime(2000, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)
_CHUNK: Final = 256 * 1024  # bytes a CopyData message


def _text(value: str) -> bytes:
    data = value.encode()
    return _length(len(data)) + data


class HistoryEncoder:
    """One batch's history rows, as the chunks of one binary ``COPY`` into :data:`COLUMNS`.

    ``jsonb``: the column ``body`` is ``jsonb`` (a history kept as such, see ``schema.py``),
    else ``json``. Event times are validated to lie between 1900 and 9000, far from
    PostgreSQL's infinities, so a time is plain microseconds.
    """

    __slots__ = ("_jsonb", "_parts", "_recorded_at", "_size", "_texts")

    def __init__(self, recorded_at: datetime, *, jsonb: bool) -> None:
        self._recorded_at = (recorded_at - _EPOCH) // _MICROSECOND
        self._jsonb = jsonb
        # audit ids, event types and topics, each encoded once a batch
        self._texts: dict[str | None, bytes] = {None: _NULL}
        self._parts: list[bytes] = [_SIGNATURE]
        self._size = 0

    def add(self, event: AuditEvent, position: Position | None, body: bytes) -> None:
        """Append the row of ``event`` read at ``position``; ``body`` is its JSON (UTF-8)."""
        texts = self._texts
        audit_id, kind = event.audit_id, event.type
        # history kept for a rebuild may have no position: NULLs (rare)
        topic, partition, offset = position if position is not None else (None, None, None)
        if partition is None or offset is None:
            self._parts.append(self._unplaced(event, partition, offset))
        else:
            self._parts.append(
                _fixed(
                    10,
                    16,
                    event.event_id.bytes,
                    8,
                    (event.occurred_at - _EPOCH) // _MICROSECOND,
                    4,
                    partition,
                    8,
                    offset,
                    8,
                    self._recorded_at,
                )
            )
        cause = event.causation_id
        self._parts += (
            texts.get(audit_id) or texts.setdefault(audit_id, _text(audit_id)),
            texts.get(kind) or texts.setdefault(kind, _text(kind)),
            texts.get(topic) or texts.setdefault(topic, _NULL if topic is None else _text(topic)),
            _NULL if cause is None else _uuid(16, cause.bytes),
            _length(len(body) + 1) + b"\x01" if self._jsonb else _length(len(body)),
            body,
        )
        self._size += len(body) + 100

    def _unplaced(self, event: AuditEvent, partition: int | None, offset: int | None) -> bytes:
        """The fixed fields of a row kept without a log position (rare): NULLs."""
        occurred = (event.occurred_at - _EPOCH) // _MICROSECOND
        head = struct.pack(">hi16siq", 10, 16, event.event_id.bytes, 8, occurred)
        placed = (_NULL if partition is None else struct.pack(">ii", 4, partition)) + (
            _NULL if offset is None else struct.pack(">iq", 8, offset)
        )
        return head + placed + struct.pack(">iq", 8, self._recorded_at)

    def full(self) -> bool:
        """Enough rows for one message to the server."""
        return self._size >= _CHUNK

    def take(self, *, last: bool = False) -> bytes:
        """The rows added since the last ``take`` (with the trailer when ``last``)."""
        if last:
            self._parts.append(_TRAILER)
        data = b"".join(self._parts)
        self._parts.clear()
        self._size = 0
        return data


def encode_all(
    rows: Iterable[tuple[AuditEvent, Position | None, bytes]],
    recorded_at: datetime,
    *,
    jsonb: bool = False,
) -> Iterator[bytes]:
    """``(event, position, body)`` rows to chunks (tests, one-off writes)."""
    encoder = HistoryEncoder(recorded_at, jsonb=jsonb)
    for row in rows:
        encoder.add(*row)
        if encoder.full():
            yield encoder.take()
    yield encoder.take(last=True)
