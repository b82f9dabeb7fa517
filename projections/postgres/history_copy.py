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
from uuid import UUID

__all__ = ["COLUMNS", "HistoryEncoder"]

COLUMNS: Final = (
    "event_id",
    "audit_id",
    "type",
    "occurred_at",
    "causation_id",
    "topic",
    "partition",
    "offset",
    "body",
    "recorded_at",
)
_SIGNATURE: Final = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # no flags, no header extension
_TRAILER: Final = b"\xff\xff"
_NULL: Final = b"\xff\xff\xff\xff"
_ROW_ID: Final = struct.pack(">hi", len(COLUMNS), 16)  # the field count, then event_id's length
_UUID_LENGTH: Final = struct.pack(">i", 16)
_length = struct.Struct(">i").pack
_timestamp = struct.Struct(">iq").pack  # length 8, microseconds
_int4 = struct.Struct(">ii").pack
_int8 = struct.Struct(">iq").pack
_EPOCH: Final = datetime(2000, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)
_CHUNK: Final = 256 * 1024  # bytes a CopyData message


def timestamp(value: datetime) -> bytes:
    """An aware datetime as a binary ``timestamptz`` field (length included). Event times
    are validated to lie between 1900 and 9000, far from PostgreSQL's infinities."""
    return _timestamp(8, (value - _EPOCH) // _MICROSECOND)


def _text(value: str) -> bytes:
    data = value.encode()
    return _length(len(data)) + data


def _where(position: tuple[str | None, int | None, int | None] | None) -> bytes:
    topic, partition, offset = position or (None, None, None)
    return (
        (_NULL if topic is None else _text(topic))
        + (_NULL if partition is None else _int4(4, partition))
        + (_NULL if offset is None else _int8(8, offset))
    )


class HistoryEncoder:
    """One batch's history rows, as the chunks of one binary ``COPY``.

    ``jsonb``: the column ``body`` is ``jsonb`` (databases whose history was kept as such,
    see ``schema.py``), else ``json``.
    """

    __slots__ = ("_audits", "_body_prefix", "_parts", "_recorded_at", "_size", "_texts")

    def __init__(self, recorded_at: datetime, *, jsonb: bool) -> None:
        self._recorded_at = timestamp(recorded_at)
        self._body_prefix = b"\x01" if jsonb else b""
        self._audits: dict[str, bytes] = {}
        self._texts: dict[str, bytes] = {}  # event types and topics: a handful per batch
        self._parts: list[bytes] = [_SIGNATURE]
        self._size = 0

    def add(
        self,
        event_id: UUID,
        audit_id: str,
        kind: str,
        occurred_at: datetime,
        causation_id: UUID | None,
        position: tuple[str, int, int] | None,
        body: bytes,
    ) -> None:
        """Append one row; ``body`` is the event's JSON (UTF-8)."""
        audit = self._audits.get(audit_id)
        if audit is None:
            audit = self._audits[audit_id] = _text(audit_id)
        texts = self._texts
        type_field = texts.get(kind)
        if type_field is None:
            type_field = texts[kind] = _text(kind)
        if position is None or position[0] is None:
            where = _where(position)  # history kept without a position (rare)
        else:
            topic, partition, offset = position
            topic_field = texts.get(topic)
            if topic_field is None:
                topic_field = texts[topic] = _text(topic)
            where = topic_field + _int4(4, partition) + _int8(8, offset)
        prefix = self._body_prefix
        self._parts += (
            _ROW_ID,
            event_id.bytes,
            audit,
            type_field,
            _timestamp(8, (occurred_at - _EPOCH) // _MICROSECOND),
            _NULL if causation_id is None else _UUID_LENGTH + causation_id.bytes,
            where,
            _length(len(body) + len(prefix)) + prefix if prefix else _length(len(body)),
            body,
            self._recorded_at,
        )
        self._size += len(body) + 100

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
    rows: Iterable[tuple[UUID, str, str, datetime, UUID | None, tuple[str, int, int], bytes]],
    recorded_at: datetime,
    *,
    jsonb: bool = False,
) -> Iterator[bytes]:
    """Rows to chunks (for tests and one-off writes)."""
    encoder = HistoryEncoder(recorded_at, jsonb=jsonb)
    for row in rows:
        encoder.add(*row)
        if encoder.full():
            yield encoder.take()
    yield encoder.take(last=True)
