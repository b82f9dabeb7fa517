"""What a consumer needs to know of a polled batch as a whole: its partitions, each one's next
offset, its records per partition.

A batch holds up to tens of thousands of records, nearly always of one topic: for a batch of
one topic, each helper keys records by partition alone (a small int) and adds the topic once
per partition, rather than making a ``(topic, partition)`` pair per record.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Sequence

from consumers.eventlog.port import Record

__all__ = ["counts_by_partition", "next_offsets", "partitions_of"]

_topic = operator.attrgetter("topic")
_partition = operator.attrgetter("partition")
_offset = operator.attrgetter("offset")
_topic_partition = operator.attrgetter("topic", "partition")


def _one_topic(records: Sequence[Record]) -> str | None:
    """The topic of every record in ``records``, or ``None`` when they have several (or none)."""
    topics = set(map(_topic, records))
    return topics.pop() if len(topics) == 1 else None


def partitions_of(records: Sequence[Record]) -> set[tuple[str, int]]:
    """The ``(topic, partition)`` pairs of ``records``."""
    topic = _one_topic(records)
    if topic is None:
        return set(map(_topic_partition, records))
    return {(topic, p) for p in set(map(_partition, records))}


def next_offsets(records: Sequence[Record]) -> dict[tuple[str, int], int]:
    """Each partition's offset past its last record in ``records`` (in their order)."""
    topic = _one_topic(records)
    if topic is None:
        last = dict(zip(map(_topic_partition, records), map(_offset, records), strict=True))
        return {tp: offset + 1 for tp, offset in last.items()}
    ends = dict(zip(map(_partition, records), map(_offset, records), strict=True))
    return {(topic, p): offset + 1 for p, offset in ends.items()}


def counts_by_partition(records: Sequence[Record]) -> dict[tuple[str, int], int]:
    """How many of ``records`` each partition has."""
    topic = _one_topic(records)
    if topic is None:
        return dict(Counter(map(_topic_partition, records)))
    return {(topic, p): n for p, n in Counter(map(_partition, records)).items()}
