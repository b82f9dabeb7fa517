"""aiokafka records to and from the port's :class:`~consumers.eventlog.port.Record` and
:class:`~consumers.eventlog.port.OutRecord`, shared by the log (``log.py``) and its consumers
(``consumer.py``): decoding fetched records, Kafka's default partitioner, and appending
in one batch per partition (the choices are documented in ``log.py``).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from typing import Any, NoReturn

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, MessageSizeTooLargeError
from aiokafka.partitioner import murmur2
from aiokafka.structs import ConsumerRecord

from consumers.eventlog.kafka.errors import event_log_error
from consumers.eventlog.port import OutRecord, Record

__all__ = ["key_hash", "port_record", "raise_failure", "send_all", "send_some", "to_record"]


def port_record(
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    headers: tuple[tuple[str, bytes | None], ...],
    timestamp: int,
) -> Record:
    """The port's record of a fetched one: the key as text, no value as ``b""``, a header
    without value (other producers) as ``b""``. (``fetching.py`` makes its records so, inline:
    ``tests/consumers/eventlog/test_kafka_fetching.py`` holds the two equal.)"""
    return Record(
        topic,
        partition,
        offset,
        None if key is None else key.decode("utf-8", "replace"),
        b"" if value is None else value,
        tuple((k, v or b"") for k, v in headers),
        timestamp,
    )


def to_record(msg: ConsumerRecord[bytes, bytes]) -> Record:
    return port_record(
        msg.topic, msg.partition, msg.offset, msg.key, msg.value, msg.headers, msg.timestamp
    )


@functools.lru_cache(maxsize=1 << 16)
def key_hash(key: bytes) -> int:
    """Kafka's default partitioner: murmur2 of the key (audit ids repeat: cached)."""
    return int(murmur2(key) & 0x7FFFFFFF)


async def send_all(producer: AIOKafkaProducer, records: Sequence[OutRecord]) -> None:
    """Append ``records``: one batch per partition at a time (far faster than a ``send`` per
    record), then wait for every acknowledgement. Order per partition is kept."""
    _, failure = await send_some(producer, records)
    if failure is not None:
        raise_failure(failure)


def raise_failure(failure: tuple[BaseException, str]) -> NoReturn:
    cause, what = failure
    if isinstance(cause, (KafkaError, OSError, TimeoutError)):
        raise event_log_error(cause, what) from cause
    raise cause


async def send_some(
    producer: AIOKafkaProducer, records: Sequence[OutRecord]
) -> tuple[list[OutRecord], tuple[BaseException, str] | None]:
    """:func:`send_all` that reports instead of raising: the records not acknowledged (in
    their order), and the first failure with what was being done (``None``: all went)."""
    partitions: dict[str, list[int]] = {}
    building: dict[tuple[str, int], Any] = {}
    members: dict[tuple[str, int], list[int]] = {}  # indexes of the batch being built
    sent: list[tuple[str, int, asyncio.Future[Any], list[int]]] = []
    failure: tuple[BaseException, str] | None = None
    limit = producer._max_request_size
    rec: OutRecord | None = None
    try:
        for i, rec in enumerate(records):
            key = rec.key.encode()
            headers = list(rec.headers)
            size = len(key) + len(rec.value) + sum(len(k) + len(v) for k, v in headers)
            if size > limit:
                raise MessageSizeTooLargeError(f"record of {size} bytes > {limit}")
            if rec.topic not in partitions:
                partitions[rec.topic] = sorted(await producer.partitions_for(rec.topic))
            ids = partitions[rec.topic]
            if rec.partition is None:
                tp = (rec.topic, ids[key_hash(key) % len(ids)])
            elif rec.partition in ids:
                tp = (rec.topic, rec.partition)
            else:
                raise ValueError(f"{rec.topic} has no partition {rec.partition}")
            batch = building.get(tp)
            if batch is None:
                batch = building[tp] = producer.create_batch()
                members[tp] = []
            if batch.append(key=key, value=rec.value, timestamp=None, headers=headers) is None:
                future = await producer.send_batch(batch, tp[0], partition=tp[1])
                sent.append((*tp, future, members[tp]))
                batch = building[tp] = producer.create_batch()
                members[tp] = []
                if batch.append(key=key, value=rec.value, timestamp=None, headers=headers) is None:
                    raise MessageSizeTooLargeError(f"record of {size} bytes")
            members[tp].append(i)
        for (topic, partition), batch in list(building.items()):
            future = await producer.send_batch(batch, topic, partition=partition)
            sent.append((topic, partition, future, members.pop((topic, partition))))
            del building[(topic, partition)]
    except (KafkaError, OSError, TimeoutError) as exc:
        where = f"{rec.topic} (key {rec.key!r})" if rec is not None else "Kafka"
        failure = (exc, f"append to {where}")
    results = await asyncio.gather(*(fut for _, _, fut, _ in sent), return_exceptions=True)
    acknowledged: set[int] = set()
    for (topic, partition, _, indexes), result in zip(sent, results, strict=True):
        if isinstance(result, BaseException):
            if failure is None:
                failure = (result, f"append to {topic}/{partition}")
        else:
            acknowledged.update(indexes)
    if failure is None:
        return [], None
    return [r for i, r in enumerate(records) if i not in acknowledged], failure
