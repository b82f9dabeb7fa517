"""Waiting until what a partition holds is readable ``read_committed`` (the dead-letter box,
``letters.py``).

A ``read_committed`` reader sees a partition up to its *last stable offset*: the first offset
of the oldest transaction still open on it, else the high watermark. Two things keep records
that are already committed beyond it for a moment:

- a commit returns once the transaction coordinator has decided it; the commit markers land on
  the partitions a moment later (KAFKA-5477), and until they do the transaction counts as open;
- another producer's transaction opened on the partition *before* them holds the last stable
  offset back until it ends, however long ago they were committed.

:func:`wait_stable` takes the high watermark, then waits until the last stable offset reaches
it: every transaction begun before has ended, so every record committed before is readable.
aiokafka's consumers ask for offsets at their own isolation level, and its admin client for
none, so both offsets come from a ``ListOffsets`` request (v2+, which carries the isolation
level) sent to the partition's leader.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError, for_code
from aiokafka.protocol.offset import OffsetRequest

from statemachine.errors import EventLogError

__all__ = ["READ_COMMITTED", "READ_UNCOMMITTED", "offsets", "wait_stable"]

READ_UNCOMMITTED = 0  # ListOffsets' isolation levels: the high watermark
READ_COMMITTED = 1  # the last stable offset
_LATEST = -1


async def _leaders(admin: AIOKafkaAdminClient, topic: str) -> dict[int, int]:
    described: list[dict[str, Any]] = await admin.describe_topics([topic])
    for t in described:
        if t["topic"] == topic and t["error_code"] == 0:
            return {p["partition"]: p["leader"] for p in t["partitions"]}
    raise EventLogError(
        f"Kafka: topic {topic} does not exist (run `auditrec init`)", retriable=False
    )


async def offsets(
    admin: AIOKafkaAdminClient,
    topic: str,
    partitions: Sequence[int],
    isolation: int,
    leaders: dict[int, int] | None = None,
) -> dict[int, int]:
    """``{partition: end offset}`` of ``topic``: the high watermarks (``READ_UNCOMMITTED``) or
    the last stable offsets (``READ_COMMITTED``). Raises aiokafka's errors."""
    leaders = leaders if leaders is not None else await _leaders(admin, topic)
    by_leader: dict[int, list[int]] = {}
    for partition in partitions:
        by_leader.setdefault(leaders[partition], []).append(partition)
    out: dict[int, int] = {}
    for leader, asked in by_leader.items():
        request = OffsetRequest(-1, isolation, [(topic, [(p, _LATEST) for p in asked])])
        response = await admin._send_request(request, leader)
        for _, answers in response.topics:
            for partition, error, _timestamp, offset in answers:
                if error:
                    raise for_code(error)(f"end offset of {topic}/{partition}")
                out[partition] = offset
    return out


async def wait_stable(
    admin: AIOKafkaAdminClient, topic: str, partitions: Sequence[int], *, timeout: float
) -> None:
    """Until every record committed on these partitions before the call is readable
    ``read_committed``. Raises a retriable :class:`EventLogError` after ``timeout`` seconds (a
    transaction that stays open: its producer died, and the broker aborts it after its
    transaction timeout), and aiokafka's errors."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    high: dict[int, int] | None = None
    leaders: dict[int, int] | None = None
    while True:
        try:
            leaders = leaders or await _leaders(admin, topic)
            if high is None:
                high = await offsets(admin, topic, partitions, READ_UNCOMMITTED, leaders)
            stable = await offsets(admin, topic, partitions, READ_COMMITTED, leaders)
        except KafkaError as exc:  # e.g. a leader moved: ask where it went, and again
            if not exc.retriable or time.monotonic() >= deadline:
                raise
            leaders = None
        else:
            behind = {p: (stable[p], high[p]) for p in partitions if stable[p] < high[p]}
            if not behind:
                return
            if time.monotonic() >= deadline:
                where = ", ".join(f"{topic}/{p} at {s} of {h}" for p, (s, h) in behind.items())
                raise EventLogError(
                    f"Kafka: a transaction stays open after {timeout:g}s: {where}",
                    retriable=True,
                )
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.1)
