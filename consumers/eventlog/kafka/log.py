"""The production event log: Apache Kafka through aiokafka.

Deviations and choices (the port is documented in ``port.py``; consumers, rebalancing and
transactional commits in ``consumer.py``; the topics :meth:`KafkaEventLog.init` makes in
``topics.py``; how its clients connect and are made in ``clients.py``; its ports, on this
log's clients, in ``inspection.py``, ``retention.py`` and ``letters.py``):

- A record's partition is Kafka's default: murmur2 of its key (the audit id), so all records
  of one audit share a partition and keep their order.
- Everything is read ``read_committed``: consumers skip aborted transactions, and the end
  offsets the inspection port gives are last stable offsets. Transaction markers occupy
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
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, OutOfOrderSequenceNumber, UnknownProducerId

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
from consumers.eventlog.kafka.inspection import KafkaInspection
from consumers.eventlog.kafka.letters import KafkaDeadLetters
from consumers.eventlog.kafka.records import key_hash, raise_failure, send_some
from consumers.eventlog.kafka.retention import KafkaRetention
from consumers.eventlog.kafka.topics import create_topics, new_topics, wait_for_leaders
from consumers.eventlog.letters import is_dead_letter
from consumers.eventlog.port import AssignCallback, EventLog, OutRecord, Topics
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

    inspection: KafkaInspection
    retention: KafkaRetention
    dead_letters: KafkaDeadLetters

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
        self.inspection = KafkaInspection(self)
        self.retention = KafkaRetention(self, self.inspection)
        self.dead_letters = KafkaDeadLetters(self, self.inspection)

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

    def partition_for(self, key: str, partitions: int) -> int:
        return key_hash(key.encode()) % partitions

    # -- writing ------------------------------------------------------------------------

    async def append(self, records: Sequence[OutRecord]) -> None:
        if not records:
            return
        self._started()
        if any(is_dead_letter(r) for r in records):  # kept once, before the rest
            await self.dead_letters.set_aside([r for r in records if is_dead_letter(r)])
            records = [r for r in records if not is_dead_letter(r)]
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

    # -- pinging and consuming ------------------------------------------------------------

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
