"""The production event log: Apache Kafka through aiokafka.

Deviations and choices (the port is documented in ``eventlog.py``):

- Topics made by :meth:`KafkaEventLog.init` (existing topics are never altered):
  lifecycle, ``lifecycle_partitions`` partitions, kept forever (``retention.ms=-1``,
  ``retention.bytes=-1``: it is the event store); probe requests, same partition count, kept
  one day; dead letter, 3 partitions, kept 90 days.
- A record's partition is Kafka's default: murmur2 of its key (the audit id), so all records
  of one audit share a partition and keep their order.
- Everything is read ``read_committed``: consumers skip aborted transactions, and
  :meth:`KafkaEventLog.end_offsets` returns last stable offsets. Transaction markers occupy
  offsets, so offsets of consecutive records may have gaps.
- Rebalancing is eager: every rebalance revokes all of a member's partitions (``on_revoke``)
  and then assigns the new set (``on_assign``). An exception in either callback is raised by
  the next :meth:`Consumer.poll`.
- A ``transactional`` consumer owns one transactional producer per assigned input partition,
  with the stable ``transactional_id`` ``"{client_id}-{group}-{topic}-{partition}"`` (the
  classic exactly-once design before KIP-447, which aiokafka's group-id-only
  ``send_offsets_to_transaction`` does not support). A new owner of a partition starts its
  producer *before* its ``on_assign`` reads committed offsets: that fences the previous owner
  (a crashed or zombie member can no longer commit) and makes the broker finish or abort the
  previous owner's open transaction first. So whoever rebuilds from the committed offsets sees
  every committed output, and no output is committed twice. A transactional commit therefore
  covers exactly one input partition (``commit`` refuses more); components commit per
  partition, concurrently. :meth:`commit` also refuses offsets of partitions this member no
  longer holds.
- Non-transactional :meth:`Consumer.commit` appends the outputs, then commits the offsets:
  a crash in between redelivers the inputs (at-least-once, like any Kafka consumer).
- :meth:`KafkaEventLog.append` builds one batch per partition instead of a ``send`` per
  record (~3x the throughput); the producer is idempotent (``acks=all``), so retries keep
  order and add no duplicates.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import (
    KafkaError,
    MessageSizeTooLargeError,
    TopicAlreadyExistsError,
    for_code,
)
from aiokafka.helpers import create_ssl_context
from aiokafka.partitioner import murmur2
from aiokafka.structs import ConsumerRecord
from aiokafka.structs import TopicPartition as KafkaTP

from projections.errors import ConfigError, EventLogError

from .eventlog import AssignCallback, Consumer, EventLog, OutRecord, Record, TopicPartition, Topics

if TYPE_CHECKING:
    from .settings import Settings

__all__ = ["KafkaConsumer", "KafkaEventLog"]

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


def _error(exc: BaseException, what: str, *, retriable: bool | None = None) -> EventLogError:
    if retriable is None:
        retriable = bool(getattr(exc, "retriable", not isinstance(exc, KafkaError)))
    detail = str(exc)
    name = type(exc).__name__
    return EventLogError(
        f"Kafka: {what}: {name}: {detail}" if detail else f"Kafka: {what}: {name}",
        retriable=retriable,
    )


@contextlib.contextmanager
def _translate(what: str) -> Iterator[None]:
    """Driver errors → :class:`EventLogError` with ``what`` (topic, partition, group)."""
    try:
        yield
    except EventLogError:
        raise
    except (KafkaError, OSError, TimeoutError) as exc:
        raise _error(exc, what) from exc


def _record(msg: ConsumerRecord[bytes, bytes]) -> Record:  # hot path: keep it lean
    key, value, headers = msg.key, msg.value, msg.headers
    for _, v in headers:
        if v is None:  # a header without value (other producers): b""
            headers = tuple((k, v or b"") for k, v in headers)
            break
    return Record(
        msg.topic,
        msg.partition,
        msg.offset,
        None if key is None else key.decode("utf-8", "replace"),
        b"" if value is None else value,
        headers,
        msg.timestamp,
    )


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
            with _translate(f"connect to {','.join(self.bootstrap)}"):
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
        with _translate("create topics"):
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
        with _translate(f"describe topic {topic}"):
            described = await self._describe([topic])
        for t in described:
            if t["topic"] == topic and t["error_code"] == 0:
                return sorted(p["partition"] for p in t["partitions"])
        raise EventLogError(
            f"Kafka: topic {topic} does not exist (run `auditrec init`)", retriable=False
        )

    def partition_for(self, key: str, partitions: int) -> int:
        return _key_hash(key.encode()) % partitions

    # -- writing ------------------------------------------------------------------------

    async def append(self, records: Sequence[OutRecord]) -> None:
        if not records:
            return
        producer, _, _ = self._started()
        await _send_all(producer, records)

    # -- reading ------------------------------------------------------------------------

    async def end_offsets(self, topic: str) -> dict[int, int]:
        _, _, meta = self._started()
        tps = [KafkaTP(topic, p) for p in await self.partitions(topic)]
        with _translate(f"end offsets of {topic}"):
            ends = await meta.end_offsets(tps)
        return {tp.partition: offset for tp, offset in ends.items()}

    async def group_offsets(self, group: str, topic: str) -> dict[int, int]:
        _, admin, _ = self._started()
        with _translate(f"offsets of group {group} on {topic}"):
            offsets = await admin.list_consumer_group_offsets(group)
        return {
            tp.partition: meta.offset
            for tp, meta in offsets.items()
            if tp.topic == topic and meta.offset >= 0
        }

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
            with _translate(where):
                await reader.start()
                reader.assign([tp])
                reader.seek(tp, start)
            progress, last = time.monotonic(), -1
            while True:
                with _translate(where):
                    position = await reader.position(tp)
                    if position >= end:  # judged by position: markers occupy offsets too
                        return
                    batches = await reader.getmany(tp, timeout_ms=500, max_records=5000)
                batch = [_record(m) for m in batches.get(tp, ()) if m.offset < end]
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
            raise _error(exc, f"ping {','.join(self.bootstrap)}", retriable=True) from exc

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


@functools.lru_cache(maxsize=1 << 16)
def _key_hash(key: bytes) -> int:
    """Kafka's default partitioner: murmur2 of the key (audit ids repeat: cached)."""
    return int(murmur2(key) & 0x7FFFFFFF)


async def _send_all(producer: AIOKafkaProducer, records: Sequence[OutRecord]) -> None:
    """Append ``records``: one batch per partition at a time (far faster than a ``send`` per
    record), then wait for every acknowledgement. Order per partition is kept."""
    partitions: dict[str, list[int]] = {}
    building: dict[tuple[str, int], Any] = {}
    sent: list[tuple[str, int, asyncio.Future[Any]]] = []
    failure: tuple[BaseException, str] | None = None
    limit = producer._max_request_size
    try:
        for rec in records:
            key = rec.key.encode()
            headers = list(rec.headers)
            size = len(key) + len(rec.value) + sum(len(k) + len(v) for k, v in headers)
            if size > limit:
                raise MessageSizeTooLargeError(f"record of {size} bytes > {limit}")
            if rec.topic not in partitions:
                partitions[rec.topic] = sorted(await producer.partitions_for(rec.topic))
            ids = partitions[rec.topic]
            tp = (rec.topic, ids[_key_hash(key) % len(ids)])
            batch = building.get(tp)
            if batch is None:
                batch = building[tp] = producer.create_batch()
            if batch.append(key=key, value=rec.value, timestamp=None, headers=headers) is None:
                sent.append((*tp, await producer.send_batch(batch, tp[0], partition=tp[1])))
                batch = building[tp] = producer.create_batch()
                if batch.append(key=key, value=rec.value, timestamp=None, headers=headers) is None:
                    raise MessageSizeTooLargeError(f"record of {size} bytes")
        for (topic, partition), batch in building.items():
            sent.append(
                (topic, partition, await producer.send_batch(batch, topic, partition=partition))
            )
    except (KafkaError, OSError, TimeoutError) as exc:
        failure = (exc, f"append to {rec.topic} (key {rec.key!r})")
    results = await asyncio.gather(*(fut for _, _, fut in sent), return_exceptions=True)
    for (topic, partition, _), result in zip(sent, results, strict=True):
        if failure is None and isinstance(result, BaseException):
            failure = (result, f"append to {topic}/{partition}")
    if failure is not None:
        cause, what = failure
        if isinstance(cause, (KafkaError, OSError, TimeoutError)):
            raise _error(cause, what) from cause
        raise cause


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, owner: KafkaConsumer) -> None:
        self.owner = owner

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self.owner._call(self.owner.on_revoke, revoked)
        await self.owner._drop_producers(revoked)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        try:
            await self.owner._fence(assigned)
        except Exception as exc:  # raised by the next poll()
            self.owner._callback_error = exc
            return
        await self.owner._call(self.owner.on_assign, assigned)


class KafkaConsumer(Consumer):
    def __init__(
        self,
        log: KafkaEventLog,
        group: str,
        topics: list[str],
        on_assign: AssignCallback | None,
        on_revoke: AssignCallback | None,
        transactional: bool,
    ) -> None:
        self.log = log
        self.group = group
        self.topics = topics
        self.on_assign = on_assign
        self.on_revoke = on_revoke
        self.transactional = transactional
        self._consumer: AIOKafkaConsumer | None = None
        self._txns: dict[TopicPartition, AIOKafkaProducer] = {}
        self._callback_error: BaseException | None = None

    def transactional_id(self, tp: TopicPartition) -> str:
        return f"{self.log.client_id}-{self.group}-{tp[0]}-{tp[1]}"

    async def _fence(self, assigned: Any) -> None:
        """Start the producers of newly assigned partitions (fencing their previous owners)."""
        if not self.transactional:
            return
        tps = [(tp.topic, tp.partition) for tp in assigned]
        await asyncio.gather(*(self._transactional_producer(tp) for tp in tps))

    async def _drop_producers(self, revoked: Any) -> None:
        producers = [self._txns.pop((tp.topic, tp.partition), None) for tp in revoked]
        await self.log._close(*producers)

    async def _call(self, callback: AssignCallback | None, tps: Any) -> None:
        if callback is None or not tps:  # aiokafka also reports empty revocations
            return
        try:
            await callback(self, sorted((tp.topic, tp.partition) for tp in tps))
        except Exception as exc:  # aiokafka would only log it: raise it from poll()
            self._callback_error = exc

    async def start(self) -> None:
        if self._consumer is not None:
            return
        log = self.log
        log._started()
        consumer = log._new_consumer(self.group)
        consumer.subscribe(self.topics, listener=_Listener(self))
        self._consumer = consumer  # the group may assign partitions during start()
        try:
            with _translate(f"start consumer of group {self.group} on {self.topics}"):
                await consumer.start()
        except BaseException:
            self._consumer = None
            txns, self._txns = list(self._txns.values()), {}
            await log._close(consumer, *txns)
            raise
        log._consumers.add(self)

    async def stop(self) -> None:
        consumer = self._consumer
        if consumer is None:
            return
        try:
            assigned = self.assignment()
            if assigned and self.on_revoke is not None:  # aiokafka does not call it on stop
                await self.on_revoke(self, sorted(assigned))
        finally:
            self._consumer = None
            self.log._consumers.discard(self)
            txns, self._txns = list(self._txns.values()), {}
            await self.log._close(*txns, consumer)

    def _running(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise EventLogError(f"consumer of group {self.group} is not started", retriable=False)
        return self._consumer

    def _raise_callback_error(self) -> None:
        exc, self._callback_error = self._callback_error, None
        if exc is not None:
            raise exc

    async def poll(self, max_records: int = 1000, timeout: float = 1.0) -> list[Record]:
        consumer = self._running()
        self._raise_callback_error()
        with _translate(f"poll group {self.group} on {self.topics}"):
            try:  # getmany waits for a rebalance to finish regardless of its timeout
                batches = await asyncio.wait_for(
                    consumer.getmany(timeout_ms=int(timeout * 1000), max_records=max_records),
                    timeout + 0.5,
                )
            except TimeoutError:
                return []
        self._raise_callback_error()
        out: list[Record] = []
        for msgs in batches.values():
            out.extend(_record(m) for m in msgs)
        return out

    async def commit(
        self, offsets: Mapping[TopicPartition, int], outputs: Sequence[OutRecord] = ()
    ) -> None:
        consumer = self._running()
        positions = {KafkaTP(t, p): o for (t, p), o in offsets.items()}
        where = f"commit group {self.group} at {dict(offsets)}"
        lost = sorted(set(offsets) - self.assignment())
        if lost:  # a transaction would not notice (pre-KIP-447): refuse here
            raise EventLogError(f"Kafka: {where}: {lost} no longer assigned", retriable=False)
        if self.transactional:  # offsets only ever through the partition's transactions
            if not positions and not outputs:
                return
            if len(offsets) != 1:
                raise EventLogError(
                    f"Kafka: {where}: a transactional commit covers exactly one input partition",
                    retriable=False,
                )
            [tp] = offsets
            await self._commit_transaction(tp, positions, outputs, where)
            return
        if outputs:
            await self.log.append(outputs)
        if positions:
            with _translate(where):
                await consumer.commit(positions)

    async def _transactional_producer(self, tp: TopicPartition) -> AIOKafkaProducer:
        producer = self._txns.get(tp)
        if producer is None:
            producer = self.log._new_producer(
                transactional_id=self.transactional_id(tp),
                transaction_timeout_ms=self.log.transaction_timeout_ms,
            )
            try:
                with _translate(f"start transactional producer for {tp[0]}/{tp[1]}"):
                    await producer.start()
            except BaseException:
                await self.log._close(producer)
                raise
            self._txns[tp] = producer
        return producer

    async def _commit_transaction(
        self,
        tp: TopicPartition,
        positions: dict[KafkaTP, int],
        outputs: Sequence[OutRecord],
        where: str,
    ) -> None:
        with _translate(where):
            producer = await self._transactional_producer(tp)
        try:
            with _translate(where):
                await producer.begin_transaction()
                await _send_all(producer, outputs)
                if positions:
                    await producer.send_offsets_to_transaction(positions, self.group)
                await producer.commit_transaction()
        except BaseException:
            await self._abort(tp, producer)
            raise

    async def _abort(self, tp: TopicPartition, producer: AIOKafkaProducer) -> None:
        """Abort the open transaction; a producer that cannot is replaced on next use."""
        state = producer._txn_manager.state.name
        if state == "READY":  # nothing open (e.g. begin failed before sending)
            return
        try:
            if state not in ("IN_TRANSACTION", "ABORTABLE_ERROR"):
                raise RuntimeError(state)
            timeout = self.log.request_timeout_ms / 1000
            await asyncio.wait_for(producer.abort_transaction(), timeout)
        except BaseException:  # the broker aborts it after transaction_timeout_ms
            if self._txns.get(tp) is producer:
                del self._txns[tp]
            await self.log._close(producer)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        with _translate(f"seek {tp[0]}/{tp[1]} to {offset}"):
            try:
                self._running().seek(KafkaTP(*tp), offset)
            except (AssertionError, ValueError) as exc:
                raise EventLogError(f"Kafka: seek {tp[0]}/{tp[1]}: {exc}", retriable=False) from exc

    def assignment(self) -> frozenset[TopicPartition]:
        if self._consumer is None:
            return frozenset()
        return frozenset((tp.topic, tp.partition) for tp in self._consumer.assignment())

    async def committed(self) -> dict[TopicPartition, int]:
        assigned = self.assignment()
        out: dict[TopicPartition, int] = {}
        for topic in sorted({t for t, _ in assigned}):
            for partition, offset in (await self.log.group_offsets(self.group, topic)).items():
                if (topic, partition) in assigned:
                    out[(topic, partition)] = offset
        return out

    async def lag(self) -> int:
        consumer = self._running()
        tps = list(consumer.assignment())
        if not tps:
            return 0
        with _translate(f"lag of group {self.group}"):
            ends = await consumer.end_offsets(tps)
            total = 0
            for tp in tps:
                total += max(0, ends[tp] - await consumer.position(tp))
        return total
