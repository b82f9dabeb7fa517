"""A consumer group's committed offsets, read *stable* (OffsetFetch v7, ``require_stable``).

A transactional commit returns once the transaction coordinator has decided it; the offsets it
carries are written to the group only when the commit markers land a moment later. aiokafka's
admin client fetches offsets with OffsetFetch v1–v3, which answer with the *old* offsets in
that window. Version 7 (Kafka ≥ 2.5, KIP-447) has ``require_stable``: the coordinator answers
``UNSTABLE_OFFSET_COMMIT`` while a transaction with offsets for the group is pending, and we
ask again. So after ``commit()`` returns, a stable :func:`fetch_group_offsets` never shows
offsets from before it.

A consumer that takes over a partition reads with ``stable=False``: it has started the
partition's transactional producer first, which waits for (or aborts) the previous owner's
transaction; and after a broker restart the broker was seen reporting offsets as pending for
over 30 s even so, which must not hold an assignment up.
"""

from __future__ import annotations

import asyncio
import time

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import IncompatibleBrokerVersion, for_code
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)

from statemachine.errors import EventLogError

__all__ = ["UNSTABLE_OFFSET_COMMIT", "fetch_group_offsets"]

UNSTABLE_OFFSET_COMMIT = 88


class _OffsetFetchResponseV7(Response):  # type: ignore[misc]
    API_KEY = 9
    API_VERSION = 7
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                (
                    "partitions",
                    CompactArray(
                        ("partition_index", Int32),
                        ("committed_offset", Int64),
                        ("committed_leader_epoch", Int32),
                        ("metadata", CompactString("utf-8")),
                        ("error_code", Int16),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("error_code", Int16),
        ("tags", TaggedFields),
    )


class _OffsetFetchRequestV7(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = 9
    API_VERSION = 7
    RESPONSE_TYPE = _OffsetFetchResponseV7
    SCHEMA = Schema(
        ("group_id", CompactString("utf-8")),
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                ("partition_indexes", CompactArray(Int32)),
                ("tags", TaggedFields),
            ),
        ),
        ("require_stable", Boolean),
        ("tags", TaggedFields),
    )


class _OffsetFetchV7(Request[_OffsetFetchRequestV7]):  # type: ignore[misc]
    API_KEY = 9

    def __init__(self, group: str, topic: str, partitions: list[int], stable: bool) -> None:
        self.group = group
        # Partitions named: asked for "all topics", the broker ignores pending offsets.
        self.topics: list[tuple[str, list[int], dict[int, bytes]]] = [(topic, partitions, {})]
        self.stable = stable

    def build(self, request_struct_class: type[_OffsetFetchRequestV7]) -> _OffsetFetchRequestV7:
        return request_struct_class(self.group, self.topics, self.stable, {})


async def fetch_group_offsets(
    admin: AIOKafkaAdminClient,
    group: str,
    topic: str,
    partitions: list[int],
    *,
    stable: bool = True,
    timeout: float = 30.0,
) -> dict[int, int]:
    """``{partition: next offset}`` committed by ``group`` on ``topic``, none of them pending.

    Waits (up to ``timeout`` seconds) while a transaction carrying offsets for the group is
    being completed. With ``stable=False``: the offsets as they are, at once (a pending
    transaction's offsets are not shown). Falls back to an unstable read on brokers older
    than Kafka 2.5. Raises aiokafka's errors (the caller translates them), or a retriable
    :class:`EventLogError` when the offsets stay pending past ``timeout``.
    """
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        coordinator = await admin.find_coordinator(group)
        try:
            request = _OffsetFetchV7(group, topic, partitions, stable)
            response = await admin._send_request(request, coordinator)
        except (IncompatibleBrokerVersion, NotImplementedError):  # broker without v7
            offsets = await admin.list_consumer_group_offsets(group)
            return {tp.partition: m.offset for tp, m in offsets.items() if tp.topic == topic}
        if response.error_code:
            raise for_code(response.error_code)(f"offsets of group {group}")
        out: dict[int, int] = {}
        unstable = False
        for name, answers, _ in response.topics:
            for partition, offset, _epoch, _meta, error, _tags in answers:
                if error == UNSTABLE_OFFSET_COMMIT:
                    unstable = True
                elif error:
                    raise for_code(error)(f"offsets of group {group} on {name}/{partition}")
                elif offset >= 0:
                    out[partition] = offset
        if not unstable:
            return out
        if time.monotonic() >= deadline:
            raise EventLogError(
                f"Kafka: offsets of group {group} still pending a transaction after {timeout:g}s",
                retriable=True,
            )
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.5)
