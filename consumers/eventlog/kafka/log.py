"""The production event log: Apache Kafka through aiokafka.

Deviations and choices (the port is documented in ``port.py``; consumers, rebalancing and
transactional commits in ``consumer.py``; the topics :meth:`KafkaEventLog.init` makes in
``topics.py``; how its clients connect and are made in ``clients.py``):

- A record's partition is Kafka's default: murmur2 of its key (the audit id), so all records
  of one audit share a partition and keep their order.
- Everything is read ``read_committed``: consumers skip aborted transactions, and
  :meth:`KafkaEventLog.end_offsets` returns last stable offsets. Transaction markers occupy
  offsets, so offsets of consecutive records may have gaps.
- :meth:`KafkaEventLog.append` builds one batch per partition instead of a ``send`` per
  record (~3x the throughput); the producer is idempotent (``acks=all``), so retries keep
  order and add no duplicates. When the broker has lost track of the producer's sequence
  numbers (``OutOfOrderSequenceNumber``/``UnknownProducerId``, seen after a broker restart),
  aiokafka's producer would fail every later append: the log replaces it and sends again only
  the records that were not acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, OutOfOrderSequenceNumber, UnknownProducerId
from aiokafka.structs import TopicPartition as KafkaTP

from consumers.eventlog.kafka import retention
from consumers.eventlog.kafka.clients import (
    bootstrap_servers,
    connection_options,
    consumer_settings,
    new_consumer,
    new_producer,
    producer_settings,
)
from consumers.eventlog.kafka.consumer import KafkaConsumer
from consumers.eventlog.kafka.errors import event_log_error, translate
from consumers.eventlog.kafka.offsets import fetch_group_offsets
from consumers.eventlog.kafka.reading import read_partition
from consumers.eventlog.kafka.records import key_hash, raise_failure, send_some
from consumers.eventlog.kafka.topics import create_topics, new_topics, wait_for_leaders
from consumers.eventlog.port import AssignCallback, EventLog, OutRecord, Record, Topics
from statemachine.errors import EventLogError

if TYPE_CHECKING:
    from consumers.runtime.settings import Settings

__all__ = ["KafkaConsumer", "KafkaEventLog"]

log = structlog.get_logger("auditrec.kafka")

# Errors after which the idempotent producer's sequence numbers no longer match the broker's.
_PRODUCER_STATE_LOST = (OutOfOrderSequenceNumber, UnknownProducerId)


class KafkaEventLog(EventLog):
    """Security options come from ``settings`` (``AUDITREC_KAFKA_*``); explicit keyword
    arguments win. ``consumer_options`` / ``producer_options`` pass aiokafka settings through
    (e.g. ``heartbeat_interval_ms``)."""

    def __init__(
        self,
        url: str,
        topics: Topics,
        *,
        settings: Settings | None = None,
        security_protocol: str | None = None,
        sasl_mechanism: str | None = None,
        sasl_username: str | None = None,
        sasl_password: Any = None,
        ssl_cafile: Any = None,
        ssl_certfile: Any = None,
        ssl_keyfile: Any = None,
        lifecycle_partitions: int | None = None,
        replication_factor: int | None = None,
        client_id: str = "auditrec",
        instance_id: str | None = None,
        transaction_timeout_ms: int = 20_000,
        request_timeout_ms: int = 30_000,
        ping_timeout: float = 5.0,
        consumer_options: Mapping[str, Any] | None = None,
        producer_options: Mapping[str, Any] | None = None,
    ) -> None:
        def pick(explicit: Any, name: str, default: Any) -> Any:
            if explicit is not None:
                return explicit
            return getattr(settings, name) if settings is not None else default

        self.url = url
        self.topics = topics
        self.bootstrap = bootstrap_servers(url)
        self.client_id = client_id
        # Static group membership (KIP-345): a consumer restarted under the same identity
        # within the session timeout gets its partitions back without a rebalance.
        self.instance_id: str | None = pick(instance_id, "instance_id", None)
        self.lifecycle_partitions: int = pick(
            lifecycle_partitions, "kafka_lifecycle_partitions", 12
        )
        self.replication_factor: int = pick(replication_factor, "kafka_replication_factor", 1)
        self.transaction_timeout_ms = transaction_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.ping_timeout = ping_timeout
        self._conn = connection_options(
            self.bootstrap,
            request_timeout_ms,
            protocol=pick(security_protocol, "kafka_security_protocol", "PLAINTEXT"),
            mechanism=pick(sasl_mechanism, "kafka_sasl_mechanism", None),
            username=pick(sasl_username, "kafka_sasl_username", None),
            password=pick(sasl_password, "kafka_sasl_password", None),
            cafile=pick(ssl_cafile, "kafka_ssl_cafile", None),
            certfile=pick(ssl_certfile, "kafka_ssl_certfile", None),
            keyfile=pick(ssl_keyfile, "kafka_ssl_keyfile", None),
        )
        self._consumer_options = consumer_settings(consumer_options)
        self._producer_options = producer_settings(producer_options)
        self._producer: AIOKafkaProducer | None = None
        self._admin: AIOKafkaAdminClient | None = None
        self._meta: AIOKafkaConsumer | None = None
        self._consumers: set[KafkaConsumer] = set()
        self._renewing = asyncio.Lock()

    # -- lifecycle ----------------------------------------------------------------------

    def _new_producer(self, **options: Any) -> AIOKafkaProducer:
        return new_producer(self.client_id, self._conn, self._producer_options, options)

    def _new_consumer(self, group: str | None, **options: Any) -> AIOKafkaConsumer:
        return new_consumer(self.client_id, group, self._conn, self._consumer_options, options)

    async def start(self) -> None:
        if self._producer is not None:
            return
        producer = self._new_producer()
        admin = AIOKafkaAdminClient(client_id=self.client_id, **self._conn)
        meta = self._new_consumer(None)
        try:
            with translate(f"connect to {','.join(self.bootstrap)}"):
                await producer.start()
                await admin.start()
                await meta.start()
        except BaseException:
            await self._close(producer, admin, meta)
            raise
        self._producer, self._admin, self._meta = producer, admin, meta

    async def stop(self) -> None:
        for consumer in list(self._consumers):
            await consumer.stop()
        producer, admin, meta = self._producer, self._admin, self._meta
        self._producer = self._admin = self._meta = None
        if producer is not None:
            await self._close(producer, admin, meta)

    @staticmethod
    async def _close(*clients: Any) -> None:
        for client in clients:
            if client is None:
                continue
            with contextlib.suppress(KafkaError, OSError):
                await (client.close() if isinstance(client, AIOKafkaAdminClient) else client.stop())

    def _started(self) -> tuple[AIOKafkaProducer, AIOKafkaAdminClient, AIOKafkaConsumer]:
        if self._producer is None or self._admin is None or self._meta is None:
            raise EventLogError("Kafka event log is not started", retriable=False)
        return self._producer, self._admin, self._meta

    # -- topics -------------------------------------------------------------------------

    def _new_topics(self) -> list[NewTopic]:
        return new_topics(self.topics, self.lifecycle_partitions, self.replication_factor)

    async def init(self) -> list[str]:
        _, admin, _ = self._started()
        with translate("create topics"):
            created = await create_topics(admin, self._new_topics())
            await wait_for_leaders(self._describe, list(self.topics.all()))
        return created

    async def _describe(self, topics: list[str]) -> list[dict[str, Any]]:
        _, admin, _ = self._started()
        described: list[dict[str, Any]] = await admin.describe_topics(topics)
        return described

    async def partitions(self, topic: str) -> list[int]:
        with translate(f"describe topic {topic}"):
            described = await self._describe([topic])
        for t in described:
            if t["topic"] == topic and t["error_code"] == 0:
                return sorted(p["partition"] for p in t["partitions"])
        raise EventLogError(
            f"Kafka: topic {topic} does not exist (run `auditrec init`)", retriable=False
        )

    def partition_for(self, key: str, partitions: int) -> int:
        return key_hash(key.encode()) % partitions

    # -- writing ------------------------------------------------------------------------

    async def append(self, records: Sequence[OutRecord]) -> None:
        if not records:
            return
        producer, _, _ = self._started()
        unsent, failure = await send_some(producer, records)
        if failure is not None and isinstance(failure[0], _PRODUCER_STATE_LOST):
            # The broker lost track of this producer's sequence numbers (seen after a broker
            # restart): aiokafka's producer would fail every append from now on. The records
            # it did not acknowledge were not written: send them again with a new producer.
            log.warning("renewing the Kafka producer", error=repr(failure[0]))
            producer = await self._renew_producer(producer)
            unsent, failure = await send_some(producer, unsent)
        if failure is not None:
            raise_failure(failure)

    async def _renew_producer(self, broken: AIOKafkaProducer) -> AIOKafkaProducer:
        async with self._renewing:
            if self._producer is broken:  # not renewed by a concurrent append meanwhile
                fresh = self._new_producer()
                try:
                    with translate("start a new Kafka producer"):
                        await fresh.start()
                except BaseException:
                    await self._close(fresh)
                    raise
                self._producer = fresh
                await self._close(broken)
        producer, _, _ = self._started()
        return producer

    # -- reading ------------------------------------------------------------------------

    async def end_offsets(self, topic: str) -> dict[int, int]:
        _, _, meta = self._started()
        tps = [KafkaTP(topic, p) for p in await self.partitions(topic)]
        with translate(f"end offsets of {topic}"):
            ends = await meta.end_offsets(tps)
        return {tp.partition: offset for tp, offset in ends.items()}

    async def start_offsets(self, topic: str) -> dict[int, int]:
        _, _, meta = self._started()
        return await retention.start_offsets(meta, topic, await self.partitions(topic))

    async def offsets_at(self, topic: str, at_ms: int) -> dict[int, int]:
        _, _, meta = self._started()
        return await retention.offsets_at(meta, topic, await self.end_offsets(topic), at_ms)

    async def trim(self, topic: str, before: Mapping[int, int]) -> None:
        _, admin, _ = self._started()
        await retention.delete_before(admin, topic, before, await self.end_offsets(topic))

    async def group_offsets(self, group: str, topic: str) -> dict[int, int]:
        return await self.committed_offsets(group, topic, await self.partitions(topic))

    async def committed_offsets(
        self, group: str, topic: str, partitions: Sequence[int], *, stable: bool = True
    ) -> dict[int, int]:
        """:meth:`group_offsets` of some partitions only (a stable read waits for the
        transactions pending on the partitions asked about, and only on those)."""
        _, admin, _ = self._started()
        with translate(f"offsets of group {group} on {topic}"):
            return await fetch_group_offsets(admin, group, topic, sorted(partitions), stable=stable)

    async def read(
        self, topic: str, partition: int, start: int, end: int | None = None
    ) -> AsyncIterator[list[Record]]:
        ends = await self.end_offsets(topic)
        if partition not in ends:
            raise EventLogError(f"Kafka: {topic}/{partition} does not exist", retriable=False)
        end = ends[partition] if end is None else min(end, ends[partition])
        if start >= end:
            return
        reader = self._new_consumer(None)
        stall = self.request_timeout_ms / 1000
        reading = read_partition(
            reader, topic, partition, start, end, stall_after=stall, close=self._close
        )
        async for batch in reading:
            yield batch

    async def ping(self) -> None:
        _, admin, _ = self._started()
        try:
            await asyncio.wait_for(admin.describe_topics([]), self.ping_timeout)
        except Exception as exc:  # whatever the driver raises: unreachable
            raise event_log_error(exc, f"ping {','.join(self.bootstrap)}", retriable=True) from exc

    def consumer(
        self,
        group: str,
        topics: Sequence[str],
        *,
        on_assign: AssignCallback | None = None,
        on_revoke: AssignCallback | None = None,
        transactional: bool = False,
    ) -> KafkaConsumer:
        return KafkaConsumer(self, group, list(topics), on_assign, on_revoke, transactional)
