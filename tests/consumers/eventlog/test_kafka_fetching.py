"""Fetched records made straight into the port's Record (``fetching.py``), against a real
broker: the same records as copied from aiokafka's, for the log's consumers and its reads,
aborted transactions skipped as aiokafka skips them, a partition's records drained a few at a
time; any other aiokafka consumer unaffected; aiokafka left alone when it is not the one
expected."""

from __future__ import annotations

import hashlib
import inspect
import uuid
from collections.abc import AsyncIterator

import aiokafka
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.consumer import fetcher
from aiokafka.structs import ConsumerRecord
from aiokafka.structs import TopicPartition as KafkaTP

from consumers.eventlog.kafka import fetching
from consumers.eventlog.kafka.log import KafkaEventLog
from consumers.eventlog.kafka.records import to_record
from consumers.eventlog.port import Record, Topics
from tests.contracts.eventlog import drain
from tests.services import kafka_bootstrap

pytestmark = pytest.mark.kafka

# A record of each kind another producer may write: a key that is not UTF-8, no key, no
# value (a tombstone), a header without value.
SENT: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
    (b"a-1", b'{"n": 1}', [("event-type", b"AuditStarted"), ("schema-version", b"1")]),
    (None, b"no key", [("empty", None)]),
    (b"\xff\xfe", None, []),
    (b"a-2", b"", [("a", b"1"), ("b", None), ("c", b"3")]),
]


@pytest.fixture
async def log() -> AsyncIterator[KafkaEventLog]:
    log = KafkaEventLog(f"kafka://{kafka_bootstrap()}", Topics(f"f{uuid.uuid4().hex[:12]}"))
    await log.start()
    await log.init()
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap())
    await producer.start()
    try:
        for key, value, headers in SENT:
            await producer.send_and_wait(
                log.topics.lifecycle, value, key=key, partition=0, headers=headers
            )
    finally:
        await producer.stop()
    yield log
    await log.stop()
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap().split(","))
    await admin.start()
    try:
        await admin.delete_topics(sorted(log.topics.all()))
    finally:
        await admin.close()


async def plain_records(topic: str, count: int = len(SENT)) -> list[ConsumerRecord[bytes, bytes]]:
    """The records as aiokafka makes them for a consumer not marked (in this same process),
    reading committed records as the log's consumers do."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka_bootstrap(),
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    await consumer.start()
    try:
        tp = KafkaTP(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got: list[ConsumerRecord[bytes, bytes]] = []
        while len(got) < count:
            got += (await consumer.getmany(tp, timeout_ms=1000)).get(tp, [])
        return got
    finally:
        await consumer.stop()


async def test_the_log_reads_records_made_as_the_port_s_equal_to_copies_of_aiokafka_s(
    log: KafkaEventLog,
) -> None:
    topic = log.topics.lifecycle
    group = log.consumer(f"g-{uuid.uuid4().hex[:8]}", [topic], transactional=False)
    await group.start()
    try:
        polled = await drain(group, len(SENT))
    finally:
        await group.stop()
    read = [r async for batch in log.inspection.read(topic, 0, 0, None) for r in batch]
    assert fetching.installed()

    plain = await plain_records(topic)
    assert all(type(m) is ConsumerRecord for m in plain)  # another consumer: unaffected
    expected = [to_record(m) for m in plain]
    assert [r.key for r in expected] == ["a-1", None, "\ufffd\ufffd", "a-2"]
    assert expected[3].headers == (("a", b"1"), ("b", b""), ("c", b"3"))
    assert expected[2].value == b""
    for got in (polled, read):
        assert all(type(r) is Record for r in got)
        assert got == expected


async def test_aborted_transactions_are_skipped_and_a_partition_drains_a_few_at_a_time(
    log: KafkaEventLog,
) -> None:
    """Committed, aborted and plain records interleaved (control batches between them): the
    log's consumer and its reads get the records a plain aiokafka consumer gets, also when each
    poll takes fewer records than a fetched batch holds (the unpacking resumes)."""
    topic = log.topics.lifecycle
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap(), transactional_id=f"t-{uuid.uuid4().hex[:8]}"
    )
    plain = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap())
    await producer.start()
    await plain.start()
    try:
        for n, outcome in enumerate(("commit", "abort", "commit", "abort", "commit")):
            await producer.begin_transaction()
            for i in range(3):
                await producer.send(topic, f"{outcome}-{n}-{i}".encode(), key=b"k", partition=0)
            if outcome == "abort":
                await producer.abort_transaction()
            else:
                await producer.commit_transaction()
            await plain.send_and_wait(topic, f"plain-{n}".encode(), key=b"k", partition=0)
    finally:
        await producer.stop()
        await plain.stop()
    expected = [to_record(m) for m in await plain_records(topic, len(SENT) + 3 * 3 + 5)]
    values = [r.value for r in expected[len(SENT) :]]
    assert not any(v.startswith(b"abort") for v in values)
    assert values[:4] == [b"commit-0-0", b"commit-0-1", b"commit-0-2", b"plain-0"]
    assert len(values) == 3 * 3 + 5

    for max_records in (1000, 2):
        group = log.consumer(f"g-{uuid.uuid4().hex[:8]}", [topic], transactional=False)
        await group.start()
        try:
            polled = await drain(group, len(expected), max_records=max_records)
        finally:
            await group.stop()
        assert polled == expected, max_records
    read = [r async for batch in log.inspection.read(topic, 0, 0, None) for r in batch]
    assert read == expected
    for position, last in await positions_two_at_a_time(topic, len(expected)):
        assert position == last.offset + 1


async def positions_two_at_a_time(topic: str, count: int) -> list[tuple[int, Record]]:
    """A marked consumer's position after each batch of at most two records, with the last."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka_bootstrap(),
        enable_auto_commit=False,
        isolation_level="read_committed",
        value_deserializer=fetching.as_record,
    )
    await consumer.start()
    try:
        tp = KafkaTP(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        seen, positions = 0, []
        while seen < count:
            got = (await consumer.getmany(tp, timeout_ms=1000, max_records=2)).get(tp, [])
            if got:
                assert all(type(r) is Record for r in got)
                seen += len(got)
                positions.append((await consumer.position(tp), got[-1]))
        return positions
    finally:
        await consumer.stop()


# aiokafka's private code that ``fetching._PortRecords`` copies or relies on, as of the version
# pyproject.toml pins (0.14.*), by the first 16 hex digits of the sha256 of its source.
PRIVATE_API = {
    "PartitionRecords.__init__": "8ec1c2ae6ea1af87",  # the attributes the subclass reads
    "PartitionRecords.__next__": "63ac34a08c309098",
    "PartitionRecords._unpack_records": "b803e6d46480732c",  # copied by _unpack_port_records
    "PartitionRecords._consume_aborted_up_to": "56876530cd6412f3",
    "PartitionRecords._contains_abort_marker": "17e9ad2322ef4e0a",
    "PartitionRecords._consumer_record": "e668541600b047ab",
    "FetchResult.getone": "3fc6f963223135d2",  # next(partition_records)
    "FetchResult.getall": "3e717e30de5068d5",  # for record in partition_records
    "Fetcher._proc_fetch_request": "59bf948fff47eed5",  # makes PartitionRecords(...)
}


def _digest(name: str) -> str:
    found: object = fetching._Original if name.startswith("PartitionRecords.") else fetcher
    for part in name.split(".")[1 if found is fetching._Original else 0 :]:
        found = getattr(found, part)
    return hashlib.sha256(inspect.getsource(found).encode()).hexdigest()[:16]  # type: ignore[arg-type]


def test_the_private_aiokafka_code_fetching_relies_on_is_unchanged() -> None:
    changed = [name for name, digest in PRIVATE_API.items() if _digest(name) != digest]
    assert not changed, (
        f"aiokafka {aiokafka.__version__} changed the private aiokafka.consumer.fetcher code"
        f" that consumers/eventlog/kafka/fetching.py subclasses or copies: {changed}. Compare"
        " _PortRecords with it, then update PRIVATE_API and aiokafka's pin in pyproject.toml."
    )
    assert fetching._fits(fetching._Original)
    assert fetching.install() and fetching.installed()


def test_aiokafka_is_left_alone_when_it_is_not_the_one_expected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fetcher, "PartitionRecords", fetching._Original)
    monkeypatch.setattr(aiokafka, "__version__", "0.15.0")
    assert not fetching.install()
    assert fetcher.PartitionRecords is fetching._Original

    class Changed(fetching._Original):  # type: ignore[misc, valid-type]
        def _consumer_record(self, tp: object, record: object, extra: object) -> object:
            raise AssertionError("never called")

    class Unpacks(fetching._Original):  # type: ignore[misc, valid-type]
        def _unpack_records(self, limit: int) -> object:
            raise AssertionError("never called")

    monkeypatch.setattr(aiokafka, "__version__", "0.14.0")
    for other in (Changed, Unpacks):
        monkeypatch.setattr(fetcher, "PartitionRecords", other)
        assert not fetching.install()
        assert fetcher.PartitionRecords is other

    monkeypatch.setattr(fetcher, "PartitionRecords", fetching._Original)
    assert fetching.install() and fetching.installed()


def test_records_made_by_aiokafka_are_copied_and_the_port_s_are_kept() -> None:
    made = Record("t", 0, 5, "k", b"v", (), 7)
    assert list(fetching.records([made])) == [made]
    assert fetching.records([made])[0] is made  # type: ignore[index]
    copied = ConsumerRecord("t", 0, 5, 7, 0, b"k", b"v", None, 1, 1, ((("h", None)),))
    assert list(fetching.records([copied])) == [Record("t", 0, 5, "k", b"v", (("h", b""),), 7)]
    assert list(fetching.records([])) == []
