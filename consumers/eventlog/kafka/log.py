"""The production event log: Apache Kafka through aiokafka.

Deviations and choices (the port is documented in ``eventlog.py``; consumers, rebalancing and
transactional commits in ``kafka_consumer.py``):

- Topics made by :meth:`KafkaEventLog.init` (existing topics are never altered):
  lifecycle, ``lifecycle_partitions`` partitions, kept forever (``retention.ms=-1``,
  ``retention.bytes=-1``: it is the event store); probe requests, same partition count, kept
  one day; dead letter, 3 partitions, kept 90 days.
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
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import (
    KafkaError,
    OutOfOrderSequenceNumber,
    TopicAlreadyExistsError,
    UnknownProducerId,
    for_code,
)
from aiokafka.helpers import create_ssl_context
from aiokafka.structs import TopicPartition as KafkaTP

from consumers.eventlog.kafka.consumer import KafkaConsumer
from consumers.eventlog.kafka.errors import event_log_error, translate
from consumers.eventlog.kafka.offsets import fetch_group_offsets
from consumers.eventlog.kafka.records import key_hash, raise_failure, send_some, to_record
from consumers.eventlog.port import AssignCallback, EventLog, OutRecord, Record, Topics
from statemachine.errors import ConfigError, EventLogError

if TYPE_CHECKING:
    from consumers.runtime.settings import Settings

__all__ = ["KafkaConsumer", "KafkaEventLog"]

log = structlog.get_logger("auditrec.kafka")

# Errors after which the idempotent producer's sequence numbers no longer match the broker's.
_PRODUCER_STATE_LOST = (OutOfOrderSequenceNumber, UnknownProducerId)

DAY_MS = 24 * 3600 * 1000
DEAD_LETTER_PARTITIONS = 3
_FETCH_OPTIONS: dict[str, Any] = {
    "max_partition_fetch_bytes": 4 * 1024 * 1024,
    "fetch_max_bytes": 64 * 1024 * 1024,
}


def bootstrap_servers(url: str) -> list[str]:
    """``kafka://h1:9092,h2`` → ``["h1:9092", "h2:9092"]``."""
    rest = url.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0]
    if "@" in rest:  # never echo the URL: it may hold a secret
        raise ConfigError("AUDITREC_EVENT_LOG_URL: credentials go in AUDITREC_KAFKA_SASL_*")
    hosts = [h.strip() for h in rest.split(",") if h.strip()]
    if not hosts:
        raise ConfigError("AUDITREC_EVENT_LOG_URL: no Kafka host in kafka:// URL")
    return [h if ":" in h.rsplit("]", 1)[-1] else f"{h}:9092" for h in hosts]


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
        self.lifecycle_partitions: int = pick(
            lifecycle_partitions, "kafka_lifecycle_partitions", 12
        )
        self.replication_factor: int = pick(replication_factor, "kafka_replication_factor", 1)
        self.transaction_timeout_ms = transaction_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.ping_timeout = ping_timeout
        protocol = pick(security_protocol, "kafka_security_protocol", "PLAINTEXT")
        password = pick(sasl_password, "kafka_sasl_password", None)
        if hasattr(password, "get_secret_value"):
            password = password.get_secret_value()
        self._conn: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "security_protocol": protocol,
            "request_timeout_ms": request_timeout_ms,
        }
        mechanism = pick(sasl_mechanism, "kafka_sasl_mechanism", None)
        if mechanism:
            self._conn["sasl_mechanism"] = mechanism
        if password is not None or mechanism:
            self._conn["sasl_plain_username"] = pick(sasl_username, "kafka_sasl_username", None)
            self._conn["sasl_plain_password"] = password
        if "SSL" in protocol:
            try:
                self._conn["ssl_context"] = create_ssl_context(
                    cafile=pick(ssl_cafile, "kafka_ssl_cafile", None),
                    certfile=pick(ssl_certfile, "kafka_ssl_certfile", None),
                    keyfile=pick(ssl_keyfile, "kafka_ssl_keyfile", None),
                )
            except OSError as exc:  # ssl.SSLError too
                raise ConfigError(f"AUDITREC_KAFKA_SSL_*: cannot load TLS files: {exc}") from None
        self._consumer_options = {
            "session_timeout_ms": 10_000,
            "heartbeat_interval_ms": 1_000,
            **_FETCH_OPTIONS,
            **(consumer_options or {}),
        }
        self._producer_options = {
            "linger_ms": 5,
            "max_batch_size": 512 * 1024,
            **(producer_options or {}),
        }
        self._producer: AIOKafkaProducer | None = None
        self._admin: AIOKafkaAdminClient | None = None
        self._meta: AIOKafkaConsumer | None = None
        self._consumers: set[KafkaConsumer] = set()
        self._renewing = asyncio.Lock()

    # -- lifecycle ----------------------------------------------------------------------

    def _new_producer(self, **options: Any) -> AIOKafkaProducer:
        return AIOKafkaProducer(
            client_id=self.client_id,
            enable_idempotence=True,
            acks="all",
            **self._conn,
            **self._producer_options,
            **options,
        )

    def _new_consumer(self, group: str | None, **options: Any) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            client_id=self.client_id,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            **self._conn,
            **self._consumer_options,
            **options,
        )

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
        rf = self.replication_factor
        n = self.lifecycle_partitions
        forever = {"retention.ms": "-1", "retention.bytes": "-1"}
        return [
            NewTopic(self.topics.lifecycle, n, rf, topic_configs=forever),
            NewTopic(
                self.topics.probe_requests, n, rf, topic_configs={"retention.ms": str(DAY_MS)}
            ),
            NewTopic(
                self.topics.dead_letter,
                DEAD_LETTER_PARTITIONS,
                rf,
                topic_configs={"retention.ms": str(90 * DAY_MS)},
            ),
        ]

    async def init(self) -> list[str]:
        _, admin, _ = self._started()
        created = []
        with translate("create topics"):
            response = await admin.create_topics(self._new_topics())
            for topic, code, *rest in response.topic_errors:
                if code == 0:
                    created.append(topic)
                    continue
                exc = for_code(code)
                if exc is TopicAlreadyExistsError:
                    continue
                message = rest[0] if rest and rest[0] else exc.__name__
                raise EventLogError(
                    f"Kafka: create topic {topic}: {exc.__name__}: {message}",
                    retriable=bool(getattr(exc, "retriable", False)),
                )
            await self._wait_for_leaders(list(self.topics.all()))
        return created

    async def _wait_for_leaders(self, topics: list[str], timeout: float = 15.0) -> None:
        """Until every partition of ``topics`` has a leader (a new topic takes a moment)."""
        deadline = time.monotonic() + timeout
        while True:
            described = await self._describe(topics)
            if all(
                t["error_code"] == 0
                and t["partitions"]
                and all(p["leader"] >= 0 for p in t["partitions"])
                for t in described
            ):
                return
            if time.monotonic() > deadline:
                raise EventLogError(f"Kafka: topics {topics} have no leader yet", retriable=True)
            await asyncio.sleep(0.1)

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
        tp = KafkaTP(topic, partition)
        reader = self._new_consumer(None)
        where = f"read {topic}/{partition}"
        try:
            with translate(where):
                await reader.start()
                reader.assign([tp])
                reader.seek(tp, start)
            progress, last = time.monotonic(), -1
            while True:
                with translate(where):
                    position = await reader.position(tp)
                    if position >= end:  # judged by position: markers occupy offsets too
                        return
                    batches = await reader.getmany(tp, timeout_ms=500, max_records=5000)
                batch = [to_record(m) for m in batches.get(tp, ()) if m.offset < end]
                if batch:
                    yield batch
                if position != last:
                    progress, last = time.monotonic(), position
                elif time.monotonic() - progress > self.request_timeout_ms / 1000:
                    raise EventLogError(f"Kafka: {where}: no progress at {position}")
        finally:
            await self._close(reader)

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
