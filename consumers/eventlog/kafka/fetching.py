"""Fetched records made straight into the port's :class:`~consumers.eventlog.port.Record`.

aiokafka makes each fetched record a ``ConsumerRecord`` (a dataclass of eleven fields), which
the log's consumers then copied into a ``Record``: two objects per record, about 2.6 µs of the
reconciler's 30 per event (``bench/pipeline.py``, side by side: 31.5k and 31.9k events/s
against 34.0k and 35.3k). A consumer made with ``value_deserializer=`` :func:`as_record` is
handed ``Record`` objects instead, made as the batch is unpacked.

aiokafka unpacks a partition's fetched batches in ``PartitionRecords``, whose
``_consumer_record(tp, record)`` makes each record's object. :func:`install` replaces that
class, in aiokafka's fetcher, with a subclass that makes a ``Record`` for a consumer so made
and defers to aiokafka for any other. It replaces only the class it was written against
(aiokafka 0.14, as ``pyproject.toml`` pins it): against another, it leaves aiokafka alone,
the consumers get ``ConsumerRecord`` objects, and :func:`records` copies them as before.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from typing import Any

import aiokafka
from aiokafka.consumer import fetcher

from consumers.eventlog.kafka.records import port_record, to_record
from consumers.eventlog.port import Record

__all__ = ["as_record", "install", "installed", "records"]


def as_record(value: bytes | None) -> bytes | None:
    """The value deserializer that marks a consumer whose records are made as ``Record``
    objects (without :func:`install`, aiokafka calls it: the value unchanged)."""
    return value


_Original: type = fetcher.PartitionRecords


class _PortRecords(_Original):  # type: ignore[misc]
    """aiokafka's ``PartitionRecords``, making a ``Record`` for a consumer marked so."""

    def _consumer_record(self, tp: Any, record: Any) -> Any:
        if self._value_deserializer is not as_record:
            return super()._consumer_record(tp, record)
        return port_record(
            tp.topic,
            tp.partition,
            record.offset,
            record.key,
            record.value,
            tuple(record.headers),
            record.timestamp,
        )


def _fits(cls: type) -> bool:
    """Whether ``cls`` is the ``PartitionRecords`` this module was written against."""
    method = getattr(cls, "_consumer_record", None)
    if method is None or not aiokafka.__version__.startswith("0.14."):
        return False
    return list(inspect.signature(method).parameters) == ["self", "tp", "record"]


def install() -> bool:
    """Make marked consumers' records ``Record`` objects; whether they are."""
    if fetcher.PartitionRecords is _Original and _fits(_Original):
        fetcher.PartitionRecords = _PortRecords
    return installed()


def installed() -> bool:
    return fetcher.PartitionRecords is _PortRecords


def records(fetched: Sequence[Any]) -> Iterable[Record]:
    """A fetched partition's records as ``Record`` objects (made so already, or copied)."""
    if not fetched or type(fetched[0]) is Record:
        return fetched
    return map(to_record, fetched)
