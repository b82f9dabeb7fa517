"""Fetched records made straight into the port's :class:`~consumers.eventlog.port.Record`,
rather than as aiokafka's ``ConsumerRecord`` copied into one (+9 % events/s: bench/pipeline.py,
reconciler).

aiokafka unpacks a partition's fetched batches in its private ``PartitionRecords``: a generator
(``_unpack_records``) that skips aborted transactions and control batches and calls
``_consumer_record(tp, record)`` for each record's object. For a consumer made with
``value_deserializer=`` :func:`as_record`, :func:`install`'s subclass runs its own copy of that
generator, which makes each ``Record`` inline; any other consumer gets aiokafka's own. The
subclass replaces only the class it was written against (aiokafka 0.14, as ``pyproject.toml``
pins it): against another, aiokafka is left alone, and :func:`records` copies its records.
``tests/consumers/eventlog/test_kafka_fetching.py`` holds its records equal to copies of
aiokafka's, aborted transactions included, and fails, naming it, when the private code it
relies on changes.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import aiokafka
from aiokafka.consumer import fetcher
from aiokafka.errors import CorruptRecordException

from consumers.eventlog.kafka.records import to_record
from consumers.eventlog.port import Record

__all__ = ["as_record", "install", "installed", "records"]


def as_record(value: bytes | None) -> bytes | None:
    """The value deserializer that marks a consumer whose records are made as ``Record``
    objects (without :func:`install`, aiokafka calls it: the value unchanged)."""
    return value


_Original: type = fetcher.PartitionRecords
_new_record = tuple.__new__  # a Record without its Python-level __new__


class _PortRecords(_Original):  # type: ignore[misc]
    """aiokafka's ``PartitionRecords``, making a ``Record`` for a consumer marked so."""

    def __iter__(self) -> Any:
        # aiokafka drains a partition with ``for record in partition_records``: the generator
        # itself, without a ``__next__`` call per record.
        unpacking = self._records_iterator
        if unpacking is None or self._value_deserializer is not as_record:
            return self
        return unpacking

    def _unpack_records(self) -> Iterator[Any]:
        if self._value_deserializer is not as_record:
            return super()._unpack_records()  # type: ignore[no-any-return]
        return self._unpack_port_records()

    def _unpack_port_records(self) -> Iterator[Record]:
        """aiokafka 0.14's ``_unpack_records``, each record made as
        :func:`~consumers.eventlog.kafka.records.port_record` makes it, inline."""
        tp = self._tp
        topic, partition = tp.topic, tp.partition
        records = self._records
        read_committed = self._isolation_level == fetcher.READ_COMMITTED
        while records.has_next():
            batch = records.next_batch()
            if self._check_crcs and not batch.validate_crc():
                raise CorruptRecordException(f"Invalid CRC - {tp}")
            if read_committed and batch.producer_id is not None:
                self._consume_aborted_up_to(batch.base_offset)
                if batch.is_control_batch and self._contains_abort_marker(batch):
                    self._aborted_producers.discard(batch.producer_id)
                if batch.is_transactional and batch.producer_id in self._aborted_producers:
                    self.next_fetch_offset = batch.next_offset  # an aborted transaction's
                    continue
            if batch.is_control_batch:
                self.next_fetch_offset = batch.next_offset
                continue
            for record in batch:
                offset = record.offset
                if offset < self.next_fetch_offset:
                    continue  # before the fetch position (in a compressed batch)
                key, value, headers = record.key, record.value, tuple(record.headers)
                for _, v in headers:
                    if v is None:  # a header without value (other producers)
                        headers = tuple((k, v or b"") for k, v in headers)
                        break
                self.next_fetch_offset = offset + 1
                yield _new_record(
                    Record,
                    (
                        topic,
                        partition,
                        offset,
                        None if key is None else key.decode("utf-8", "replace"),
                        b"" if value is None else value,
                        headers,
                        record.timestamp,
                    ),
                )
            # Past the batch's last offset, even when compaction removed its last records.
            self.next_fetch_offset = batch.next_offset


def _fits(cls: type) -> bool:
    """Whether ``cls`` is the ``PartitionRecords`` this module was written against."""
    if not aiokafka.__version__.startswith("0.14."):
        return False
    shapes = {"_consumer_record": ["self", "tp", "record"], "_unpack_records": ["self"]}
    for name, parameters in shapes.items():
        method = getattr(cls, name, None)
        if method is None or list(inspect.signature(method).parameters) != parameters:
            return False
    return hasattr(fetcher, "READ_COMMITTED")


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
