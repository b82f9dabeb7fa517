"""The Kafka event log against a real broker passes the contract of the log and of each of
its ports; plus what only Kafka promises: partitions keyed by audit id, Kafka transactions,
and groups that split work."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaConnectionError, OutOfOrderSequenceNumber
from aiokafka.structs import TopicPartition as KafkaTP

from consumers.eventlog.codec import dead_letter
from consumers.eventlog.dead_letters import read_dead_letter
from consumers.eventlog.kafka.clients import bootstrap_servers
from consumers.eventlog.kafka.log import KafkaEventLog
from consumers.eventlog.kafka.offsets import fetch_group_offsets
from consumers.eventlog.kafka.records import key_hash
from consumers.eventlog.port import (
    AssignCallback,
    Consumer,
    EventLog,
    OutRecord,
    Record,
    TopicPartition,
    Topics,
)
from consumers.runtime.settings import load_settings
from statemachine.errors import ConfigError, EventLogError
from tests.contracts.eventlog import (
    WAIT,
    EventLogContract,
    EventLogFixtures,
    LogFactory,
    by_key,
    drain,
    next_offsets,
    read_all,
    records,
    until_assigned,
)
from tests.contracts.eventlog_dead_letters import DeadLetterBoxContract, bad_records
from tests.contracts.eventlog_inspection import LogInspectionContract
from tests.contracts.eventlog_retention import LogRetentionContract
from tests.eventually import eventually
from tests.services import kafka_bootstrap

pytestmark = pytest.mark.kafka

# Quick group membership for tests (the broker runs group.initial.rebalance.delay.ms=0).
FAST_GROUPS = {"heartbeat_interval_ms": 200, "session_timeout_ms": 6000}


async def read_settled(log: EventLog, topic: str, at_least: int) -> list[Record]:
    """Everything in ``topic`` once ``at_least`` records are readable (bounded by WAIT).

    A transactional commit returns before its markers are written; until they are, the last
    stable offset (and so ``read``) stops short of the transaction's records.
    """
    return await eventually(
        lambda: read_all(log, topic),
        until=lambda got: len(got) >= at_least,
        timeout=WAIT,
        message=f"{at_least} records readable in {topic}",
    )


@pytest.fixture
async def make_log() -> AsyncIterator[LogFactory]:
    """Started Kafka logs; the topics of the test are deleted afterwards."""
    servers = kafka_bootstrap()
    used: set[str] = set()

    async def make(topics: Topics) -> EventLog:
        used.update(topics.all())
        log = KafkaEventLog(f"kafka://{servers}", topics, consumer_options=FAST_GROUPS)
        await log.start()
        return log

    yield make
    if used:
        admin = AIOKafkaAdminClient(bootstrap_servers=servers.split(","))
        await admin.start()
        with contextlib.suppress(Exception):
            await admin.delete_topics(sorted(used))
        await admin.close()


class Kafka(EventLogFixtures):
    """Topics of a fresh prefix per test on the real broker, deleted afterwards."""

    @pytest.fixture
    def make_log(self, make_log: LogFactory) -> LogFactory:
        return make_log


class TestKafkaEventLog(Kafka, EventLogContract):
    pass


class TestKafkaInspection(Kafka, LogInspectionContract):
    pass


class TestKafkaRetention(Kafka, LogRetentionContract):
    pass


class TestKafkaDeadLetters(Kafka, DeadLetterBoxContract):
    async def test_a_transaction_open_ahead_of_a_dead_letter_does_not_hide_it(
        self, log: EventLog, topics: Topics
    ) -> None:
        """A ``read_committed`` reader sees a partition up to its oldest open transaction: a
        dead letter committed behind another producer's open transaction is kept all the
        same, and setting its record aside again waits for that transaction to end instead
        of appending a second copy."""
        assert isinstance(log, KafkaEventLog)
        (bad,) = await bad_records(log, topics, 1)
        letter = dead_letter(topics, bad, "projector", "not valid JSON")
        ids = await log.inspection.partitions(topics.dead_letter)
        at = ids[key_hash(letter.key.encode()) % len(ids)]
        servers = kafka_bootstrap().split(",")
        # given another producer's transaction open on the letter's dead-letter partition
        stray = AIOKafkaProducer(
            bootstrap_servers=servers,
            transactional_id=f"stray-{uuid.uuid4().hex}",
            transaction_timeout_ms=60_000,
        )
        # and the letter committed behind it, by another process's box (its step looked
        # before that transaction began)
        other = AIOKafkaProducer(
            bootstrap_servers=servers,
            transactional_id=f"{log.client_id}-dead-letters-{bad.topic}-{bad.partition}",
        )
        await stray.start()
        try:
            await stray.begin_transaction()
            await (await stray.send(topics.dead_letter, b"{}", key=b"other", partition=at))
            await other.start()
            async with other.transaction():
                await other.send_and_wait(
                    letter.topic, letter.value, letter.key.encode(), at, None, list(letter.headers)
                )
            await other.stop()

            # when this process sets the record aside while that transaction stays open
            log.dead_letters.stable_within = 1.0
            with pytest.raises(EventLogError, match="stays open") as err:
                await log.dead_letters.set_aside([letter])
            assert err.value.retriable  # the consumer tries again, and does not move on

            # then, once it ended, setting aside finds the letter and adds nothing
            await stray.abort_transaction()
            assert await log.dead_letters.set_aside([letter]) == 0
            found = [read_dead_letter(r) for r in await read_all(log, topics.dead_letter)]
            assert [(f.origin, f.reasons) for f in found if f is not None] == [
                ((bad.topic, bad.partition, bad.offset), (("projector", "not valid JSON"),))
            ]
        finally:
            await other.stop()
            await stray.stop()


@pytest.fixture
def topics() -> Topics:
    return Topics(prefix=f"k{uuid.uuid4().hex[:12]}")


@pytest.fixture
async def log(make_log: LogFactory, topics: Topics) -> AsyncIterator[KafkaEventLog]:
    log = await make_log(topics)
    assert isinstance(log, KafkaEventLog)
    await log.init()
    yield log
    await log.stop()


def test_the_url_names_the_bootstrap_servers() -> None:
    assert bootstrap_servers("kafka://k1:9093,k2") == ["k1:9093", "k2:9092"]
    assert bootstrap_servers("kafka://127.0.0.1:9092/") == ["127.0.0.1:9092"]
    with pytest.raises(ConfigError, match="no Kafka host"):
        bootstrap_servers("kafka://")
    with pytest.raises(ConfigError) as err:
        bootstrap_servers("kafka://user:s3cret@k1:9092")
    assert "s3cret" not in str(err.value)


def test_security_settings_reach_the_clients(tmp_path: Path) -> None:
    settings = load_settings(
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism="SCRAM-SHA-512",
        kafka_sasl_username="auditrec",
        kafka_sasl_password="s3cret",
        kafka_lifecycle_partitions=6,
        kafka_replication_factor=3,
    )
    log = KafkaEventLog("kafka://k1:9093", Topics(), settings=settings, sasl_username="override")
    conn = log._conn
    assert conn["security_protocol"] == "SASL_SSL"
    assert conn["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (conn["sasl_plain_username"], conn["sasl_plain_password"]) == ("override", "s3cret")
    assert isinstance(conn["ssl_context"], ssl.SSLContext)
    assert (log.lifecycle_partitions, log.replication_factor) == (6, 3)
    assert [t.num_partitions for t in log._new_topics()] == [6, 6, 3, 6, 6]

    missing = load_settings(kafka_security_protocol="SSL", kafka_ssl_cafile=tmp_path / "ca.pem")
    with pytest.raises(ConfigError, match="AUDITREC_KAFKA_SSL"):
        KafkaEventLog("kafka://k1:9093", Topics(), settings=missing)


async def test_an_unreachable_broker_is_a_retriable_error() -> None:
    log = KafkaEventLog("kafka://127.0.0.1:9", Topics(prefix="nowhere"), request_timeout_ms=2000)
    with pytest.raises(EventLogError) as err:
        await log.start()
    assert err.value.retriable
    assert "127.0.0.1:9" in str(err.value)
    await log.stop()


async def test_init_makes_the_lifecycle_topic_the_event_store(
    log: KafkaEventLog, topics: Topics
) -> None:
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    assert await log.inspection.partitions(topics.lifecycle) == list(range(12))
    assert await log.inspection.partitions(topics.probe_requests) == list(range(12))
    assert await log.inspection.partitions(topics.dead_letter) == [0, 1, 2]
    admin = log._admin
    assert admin is not None
    for kept in (topics.lifecycle, topics.dead_letter):  # dead letters go only when purged
        (response,) = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, kept)])
        configs = {entry[0]: entry[1] for entry in response.resources[0][4]}
        assert configs["retention.ms"] == "-1", kept
        assert configs["retention.bytes"] == "-1", kept
    with pytest.raises(EventLogError, match="does not exist"):
        await log.inspection.partitions(f"{topics.prefix}.missing")


async def test_records_of_an_audit_share_a_partition_and_keep_their_order(
    log: KafkaEventLog, topics: Topics
) -> None:
    keys = [f"audit-{i:03d}" for i in range(40)]
    sent = records(topics.lifecycle, keys, 25)
    await log.append(sent)
    async with log.consumer("ordered", [topics.lifecycle]) as consumer:
        got = await drain(consumer, len(sent), max_records=5000)
    assert len(got) == len(sent)
    partition_of: dict[str, set[int]] = defaultdict(set)
    values: dict[str, list[bytes]] = defaultdict(list)
    for rec in got:
        assert rec.key is not None
        partition_of[rec.key].add(rec.partition)
        values[rec.key].append(rec.value)
    assert all(parts == {log.partition_for(k, 12)} for k, parts in partition_of.items())
    assert len({p for parts in partition_of.values() for p in parts}) >= 8  # spread out
    for key in keys:
        assert values[key] == [f"v:{key}:{i}".encode() for i in range(25)]


async def test_outputs_of_an_aborted_transaction_stay_invisible(
    log: KafkaEventLog, topics: Topics, monkeypatch: pytest.MonkeyPatch
) -> None:
    await log.append(records(topics.probe_requests, ["p-1"], 3, tag="in"))
    worker = log.consumer("txn", [topics.probe_requests], transactional=True)
    async with worker:
        inputs = await drain(worker, 3)
        done = next_offsets(inputs)
        outputs = [OutRecord(topics.lifecycle, "p-1", b"out-%d" % i) for i in range(3)]
        producer = worker.transactions.producers[next(iter(done))]
        assert producer is not None

        async def broker_goes_away(*args: object) -> None:  # after the outputs were acked
            raise KafkaConnectionError("connection lost (injected)")

        with monkeypatch.context() as patch:
            patch.setattr(producer, "send_offsets_to_transaction", broker_goes_away)
            with pytest.raises(EventLogError, match="injected") as err:
                await worker.commit(done, outputs)
        assert err.value.retriable
        p = log.partition_for("p-1", 12)
        assert (await log.inspection.end_offsets(topics.lifecycle))[p] >= 4  # written, then aborted
        assert await read_all(log, topics.lifecycle) == []
        assert await log.inspection.group_offsets("txn", topics.probe_requests) == {}

        await worker.commit(done, outputs)  # the retry goes through, once
    assert [r.value for r in await read_settled(log, topics.lifecycle, 3)] == [
        o.value for o in outputs
    ]
    assert await log.inspection.group_offsets("txn", topics.probe_requests) == {
        p: o for (_, p), o in done.items()
    }
    async with log.consumer("reader", [topics.lifecycle]) as reader:
        seen = await drain(reader, 3)
    assert [r.value for r in seen] == [o.value for o in outputs]  # aborted copies skipped


async def test_group_offsets_wait_for_a_pending_transaction(
    log: KafkaEventLog, topics: Topics
) -> None:
    await log.append(records(topics.probe_requests, ["p-1"], 3, tag="in"))
    worker = log.consumer("txn", [topics.probe_requests], transactional=True)
    async with worker:
        inputs = await drain(worker, 3)
        [(tp, offset)] = next_offsets(inputs).items()
        producer = worker.transactions.producers[tp]
        await producer.begin_transaction()  # offsets sent, not yet committed: pending
        await producer.send_offsets_to_transaction({KafkaTP(*tp): offset}, "txn")
        _, admin, _ = log._started()
        with pytest.raises(EventLogError, match="pending a transaction") as err:
            await fetch_group_offsets(admin, "txn", tp[0], [tp[1]], timeout=0.3)
        assert err.value.retriable
        other = (tp[1] + 1) % 12  # asking about partitions without a pending transaction
        assert await log.inspection.committed_offsets("txn", tp[0], [other]) == {}  # does not wait

        reading = asyncio.create_task(log.inspection.group_offsets("txn", topics.probe_requests))
        # A negative check: for half a second the read must not answer (with the old, empty
        # offsets); there is no event to await for "still waiting", so time passes on purpose.
        finished, _ = await asyncio.wait({reading}, timeout=0.5)
        assert not finished  # it waits
        await producer.commit_transaction()
        assert await asyncio.wait_for(reading, WAIT) == {tp[1]: offset}


async def test_a_producer_whose_sequence_the_broker_lost_is_renewed(
    log: KafkaEventLog, topics: Topics, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = [f"k-{i}" for i in range(8)]
    sent = records(topics.lifecycle, keys, 3)
    first, _, _ = log._started()
    failed: list[int] = []
    real_send_batch = first.send_batch

    async def lost_sequence(batch: object, topic: str, partition: int) -> asyncio.Future[object]:
        if not failed:  # the first batch is refused, as the broker does after losing state
            failed.append(partition)
            refused: asyncio.Future[object] = asyncio.get_running_loop().create_future()
            refused.set_exception(OutOfOrderSequenceNumber("injected"))
            return refused
        return await real_send_batch(batch, topic, partition=partition)  # type: ignore[arg-type]

    monkeypatch.setattr(first, "send_batch", lost_sequence)
    await log.append(sent)

    renewed, _, _ = log._started()
    assert renewed is not first
    got = await read_all(log, topics.lifecycle)
    assert sorted(r.value for r in got) == sorted(r.value for r in sent)  # each exactly once
    assert by_key(got) == by_key(Record(r.topic, 0, 0, r.key, r.value) for r in sent)  # in order
    await log.append(records(topics.lifecycle, ["after"], 1))  # the new producer keeps working
    assert len(await read_all(log, topics.lifecycle)) == len(sent) + 1


async def test_an_oversized_output_fails_the_commit_and_publishes_nothing(
    log: KafkaEventLog, topics: Topics
) -> None:
    await log.append(records(topics.probe_requests, ["p-2"], 1, tag="in"))
    async with log.consumer("txn", [topics.probe_requests], transactional=True) as worker:
        inputs = await drain(worker, 1)
        good = OutRecord(topics.lifecycle, "p-2", b"fine")
        too_large = OutRecord(topics.lifecycle, "p-2", b"x" * 2_000_000)
        with pytest.raises(EventLogError, match="MessageSizeTooLarge") as err:
            await worker.commit(next_offsets(inputs), [good, too_large])
        assert not err.value.retriable
        with pytest.raises(EventLogError, match="MessageSizeTooLarge"):
            await log.append([good, too_large])
        assert await read_all(log, topics.lifecycle) == []
        assert await log.inspection.group_offsets("txn", topics.probe_requests) == {}
        await worker.commit(next_offsets(inputs), [good])
    assert [r.value for r in await read_settled(log, topics.lifecycle, 1)] == [b"fine"]


async def test_an_output_for_a_partition_the_topic_lacks_is_refused_and_nothing_published(
    log: KafkaEventLog, topics: Topics
) -> None:
    partitions = await log.inspection.partitions(topics.lifecycle)
    placed = OutRecord(topics.lifecycle, "p-3", b"placed", partition=partitions[-1])
    nowhere = OutRecord(topics.lifecycle, "p-3", b"nowhere", partition=len(partitions))
    with pytest.raises(ValueError, match=f"has no partition {len(partitions)}"):
        await log.append([placed, nowhere])
    await log.append([placed])
    settled = await read_settled(log, topics.lifecycle, 1)
    assert [(r.partition, r.value) for r in settled] == [(partitions[-1], b"placed")]


async def test_transactional_outputs_and_offsets_appear_together(
    log: KafkaEventLog, topics: Topics
) -> None:
    await log.append(records(topics.probe_requests, [f"p-{i}" for i in range(4)], 5, tag="in"))
    async with log.consumer("txn", [topics.probe_requests], transactional=True) as worker:
        inputs = await drain(worker, 20)
        by_partition: dict[int, list[Record]] = defaultdict(list)
        for r in inputs:
            by_partition[r.partition].append(r)
        done = 0
        for chunk in by_partition.values():  # a transactional commit covers one partition
            outputs = [OutRecord(topics.lifecycle, r.key or "", b"o" + r.value) for r in chunk]
            await worker.commit(next_offsets(chunk), outputs)
            done += len(chunk)
            produced = len(await read_settled(log, topics.lifecycle, done))
            committed = await log.inspection.group_offsets("txn", topics.probe_requests)
            consumed = sum(
                len([r for r in inputs if r.partition == p and r.offset < o])
                for p, o in committed.items()
            )
            assert produced == consumed == done
        with pytest.raises(EventLogError, match="exactly one input partition"):
            await worker.commit(next_offsets(inputs), [])


async def test_two_members_of_a_group_split_the_partitions(
    log: KafkaEventLog, topics: Topics
) -> None:
    events: dict[str, list[tuple[str, list[TopicPartition]]]] = defaultdict(list)

    def listener(name: str, kind: str) -> AssignCallback:
        async def record(consumer: Consumer, tps: Sequence[TopicPartition]) -> None:
            events[name].append((kind, list(tps)))

        return record

    one = log.consumer(
        "split",
        [topics.lifecycle],
        on_assign=listener("one", "assign"),
        on_revoke=listener("one", "revoke"),
    )
    two = log.consumer(
        "split",
        [topics.lifecycle],
        on_assign=listener("two", "assign"),
        on_revoke=listener("two", "revoke"),
    )
    async with one:
        assert await until_assigned(one) == []
        assert len(one.assignment()) == 12
        async with two:
            everything = {(topics.lifecycle, p) for p in range(12)}

            def settled() -> bool:
                a, b = one.assignment(), two.assignment()
                return bool(a and b and not a & b and a | b == everything)

            async def rebalanced() -> bool:
                if not settled():
                    await asyncio.gather(one.poll(timeout=0.2), two.poll(timeout=0.2))
                return settled()

            await eventually(rebalanced, timeout=WAIT, interval=0, message="the group to rebalance")

            sent = records(topics.lifecycle, [f"audit-{i}" for i in range(30)], 4)
            await log.append(sent)
            got: dict[str, list[Record]] = {"one": [], "two": []}

            async def received() -> int:
                a, b = await asyncio.gather(one.poll(timeout=0.3), two.poll(timeout=0.3))
                got["one"].extend(a)
                got["two"].extend(b)
                return len(got["one"]) + len(got["two"])

            await eventually(
                received,
                until=lambda n: n >= len(sent),
                timeout=WAIT,
                interval=0,
                message=f"{len(sent)} records between the two members",
            )
            a, b = await asyncio.gather(one.poll(timeout=0.3), two.poll(timeout=0.3))
            assert a == b == []  # nothing twice
            mine = {"one": one.assignment(), "two": two.assignment()}
    for name in ("one", "two"):
        assert got[name], f"member {name} got no record"
        assert {(r.topic, r.partition) for r in got[name]} <= mine[name]
        assert [e for e in events[name] if e[0] == "assign"][-1] == ("assign", sorted(mine[name]))
    both = got["one"] + got["two"]
    assert sorted(r.value for r in both) == sorted(r.value for r in sent)  # exactly once
    assert ("revoke", sorted(everything)) in events["one"]  # eager: all, then the new share
    assert events["two"][0][0] == "assign"


async def test_a_consumer_resumes_after_its_last_transactional_commit(
    make_log: LogFactory, log: KafkaEventLog, topics: Topics
) -> None:
    await log.append(records(topics.probe_requests, ["p-9"], 6, tag="in"))
    async with log.consumer("txn", [topics.probe_requests], transactional=True) as worker:
        inputs = await drain(worker, 6)
        await worker.commit(next_offsets(inputs[:4]), [OutRecord(topics.lifecycle, "p-9", b"o")])
    other = await make_log(topics)
    try:
        async with other.consumer("txn", [topics.probe_requests], transactional=True) as again:
            rest = await drain(again, 2)
    finally:
        await other.stop()
    assert [r.value for r in rest] == [r.value for r in inputs[4:]]


async def test_poll_returns_after_its_timeout_while_the_group_rebalances(
    log: KafkaEventLog, topics: Topics
) -> None:
    revoking = asyncio.Event()
    revoked = asyncio.Event()

    async def slow_revoke(consumer: Consumer, tps: Sequence[TopicPartition]) -> None:
        if not revoking.is_set():
            revoking.set()
            await asyncio.sleep(2.0)  # on purpose: a revocation that takes long (a big commit)
            revoked.set()

    async with log.consumer("slow", [topics.lifecycle], on_revoke=slow_revoke) as one:
        await until_assigned(one)
        two = log.consumer("slow", [topics.lifecycle])
        joining = asyncio.create_task(two.start())  # makes the group rebalance
        try:
            durations: list[float] = []

            async def polled_until_revoked() -> bool:
                began = time.monotonic()
                if got := await one.poll(timeout=0.3):
                    pytest.fail(f"records during the rebalance: {got}")
                durations.append(time.monotonic() - began)
                return revoked.is_set()

            await eventually(
                polled_until_revoked, timeout=WAIT, interval=0, message="the slow revocation"
            )
            assert revoking.is_set() and len(durations) >= 3, durations
            assert max(durations) < 1.0, durations  # the rebalance did not hold poll up
            await joining
        finally:
            await two.stop()


async def test_a_static_member_restarted_under_its_identity_gets_its_partitions_back_at_once(
    topics: Topics,
) -> None:
    # given a group of a static member and a dynamic one sharing six partitions
    url = f"kafka://{kafka_bootstrap()}"
    setup = KafkaEventLog(url, topics, lifecycle_partitions=6)
    await setup.start()
    await setup.init()
    revoked: list[list[TopicPartition]] = []

    async def on_revoke(consumer: Consumer, partitions: Sequence[TopicPartition]) -> None:
        revoked.append(list(partitions))

    group = topics.group("static")
    other = setup.consumer(group, [topics.lifecycle], on_revoke=on_revoke)

    def static_log() -> KafkaEventLog:
        return KafkaEventLog(url, topics, instance_id="node-a", consumer_options=FAST_GROUPS)

    first_log = static_log()
    await first_log.start()
    first = first_log.consumer(group, [topics.lifecycle])
    try:
        await first.start()
        await other.start()

        async def both_assigned() -> int:
            for member in (first, other):
                await member.poll(10, 0.1)
            return len(first.assignment() | other.assignment())

        await eventually(both_assigned, until=lambda n: n == 6, timeout=WAIT, interval=0)
        held = first.assignment()
        assert held and other.assignment()
        revoked.clear()

        # when the static member goes away without leaving (a crash) and comes back at once
        await first_log._close(first._consumer)
        first._consumer = None
        again_log = static_log()
        await again_log.start()
        again = again_log.consumer(group, [topics.lifecycle])
        began = time.monotonic()
        await again.start()

        async def assigned_again() -> frozenset[TopicPartition]:
            await again.poll(10, 0.1)
            return frozenset(again.assignment())

        await eventually(assigned_again, until=lambda a: a == held, timeout=WAIT, interval=0)
        took = time.monotonic() - began

        # then it holds what it held, well within the session timeout, and the other member
        # kept its partitions throughout
        assert took < FAST_GROUPS["session_timeout_ms"] / 1000 / 2, took
        for _ in range(5):
            await other.poll(10, 0.1)
        assert revoked == []
        await again.stop()
        await again_log.stop()
    finally:
        await other.stop()
        await first_log.stop()
        await setup.stop()
