"""The event log's contracts: what they share (:class:`EventLogFixtures`, the helpers) and the
handle's own, :class:`EventLogContract` (topics, appending, consumer groups, commits, records,
starting and stopping). Each of the log's ports has a suite of its own beside this module:
``eventlog_inspection.py`` (:class:`~consumers.eventlog.inspection.LogInspection`) and
``eventlog_retention.py`` (:class:`~consumers.eventlog.retention.LogRetention`); every adapter
passes every suite unchanged.

A backend subclasses each suite in a ``test_*.py`` module and overrides the ``make_log``
fixture with a factory ``async (topics) -> started EventLog``; every call within one test
opens a new instance on the same backing store (a restart), and each test gets topics with a
fresh prefix, so tests are independent. Assertions use only the ports: partition counts,
offsets and keys come from the log itself.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime

import pytest

from consumers.eventlog.codec import dead_letter, decode, encode
from consumers.eventlog.port import Consumer, EventLog, OutRecord, Record, TopicPartition, Topics
from statemachine.errors import DecodeError, EventLogError
from statemachine.events import AuditStarted, AuditStartedData
from tests.eventually import eventually

__all__ = [
    "EventLogContract",
    "EventLogFixtures",
    "LogFactory",
    "drain",
    "next_offsets",
    "read_all",
]

LogFactory = Callable[[Topics], Awaitable[EventLog]]
WAIT = 30.0  # upper bound for anything to arrive; tests finish as soon as it does


# -- helpers (also used by the backends' own tests) -------------------------------------


def records(topic: str, keys: Sequence[str], per_key: int, tag: str = "v") -> list[OutRecord]:
    """``per_key`` records for each key, interleaved: k0#0, k1#0, …, k0#1, …"""
    return [
        OutRecord(topic, key, f"{tag}:{key}:{i}".encode(), (("seq", str(i).encode()),))
        for i in range(per_key)
        for key in keys
    ]


async def drain(
    consumer: Consumer, count: int, *, timeout: float = WAIT, max_records: int = 1000
) -> list[Record]:
    """Poll until ``count`` records arrived (fails after ``timeout``), then make sure no
    extra record follows shortly after."""
    got: list[Record] = []

    async def arrived() -> int:
        got.extend(await consumer.poll(max_records=max_records, timeout=0.5))
        return len(got)

    if count:
        await eventually(
            arrived,
            until=lambda n: n >= count,
            timeout=timeout,
            interval=0,
            message=f"{count} records to arrive",
        )
    got.extend(await consumer.poll(max_records=max_records, timeout=0.3))
    return got


async def until_assigned(consumer: Consumer, *, timeout: float = WAIT) -> list[Record]:
    """Poll until the consumer holds partitions; returns what polling returned meanwhile."""
    got: list[Record] = []

    async def assigned() -> frozenset[TopicPartition]:
        if not consumer.assignment():
            got.extend(await consumer.poll(timeout=0.2))
        return frozenset(consumer.assignment())

    await eventually(assigned, timeout=timeout, interval=0, message="a partition assignment")
    return got


def next_offsets(batch: Iterable[Record]) -> dict[TopicPartition, int]:
    """The offsets to commit after ``batch``: last offset + 1 per partition."""
    out: dict[TopicPartition, int] = {}
    for rec in batch:
        tp = (rec.topic, rec.partition)
        out[tp] = max(out.get(tp, 0), rec.offset + 1)
    return out


async def read_all(log: EventLog, topic: str) -> list[Record]:
    out: list[Record] = []
    for partition in await log.inspection.partitions(topic):
        async for batch in log.inspection.read(topic, partition, 0):
            out.extend(batch)
    return out


async def read_range(
    log: EventLog, topic: str, partition: int, start: int, end: int | None = None
) -> list[Record]:
    async def collect() -> list[Record]:
        out: list[Record] = []
        async for batch in log.inspection.read(topic, partition, start, end):
            assert batch, "read() yields no empty batch"
            out.extend(batch)
        return out

    return await asyncio.wait_for(collect(), WAIT)  # read() must never hang


def by_key(batch: Iterable[Record]) -> dict[str | None, list[bytes]]:
    out: dict[str | None, list[bytes]] = defaultdict(list)
    for rec in batch:
        out[rec.key].append(rec.value)
    return dict(out)


def positions(batch: Iterable[Record]) -> list[tuple[str, int, int]]:
    return [(r.topic, r.partition, r.offset) for r in batch]


# -- the fixtures every suite shares -----------------------------------------------------


class EventLogFixtures:
    @pytest.fixture
    def make_log(self) -> LogFactory:
        raise NotImplementedError("a backend's test class overrides the make_log fixture")

    @pytest.fixture
    def topics(self) -> Topics:
        return Topics(prefix=f"t{uuid.uuid4().hex[:12]}")

    @pytest.fixture
    async def open_log(
        self, make_log: LogFactory, topics: Topics
    ) -> AsyncIterator[Callable[[], Awaitable[EventLog]]]:
        """Opens started logs on the test's topics; all are stopped at the end."""
        opened: list[EventLog] = []

        async def open_() -> EventLog:
            log = await make_log(topics)
            opened.append(log)
            return log

        yield open_
        for log in reversed(opened):
            await log.stop()

    @pytest.fixture
    async def log(self, open_log: Callable[[], Awaitable[EventLog]]) -> EventLog:
        """A started log whose topics exist."""
        log = await open_log()
        await log.init()
        return log


# -- the handle's suite -------------------------------------------------------------------


class EventLogContract(EventLogFixtures):
    # -- topics ---------------------------------------------------------------------------

    async def test_init_creates_the_three_topics_once(
        self, open_log: Callable[[], Awaitable[EventLog]], topics: Topics
    ) -> None:
        log = await open_log()
        assert sorted(await log.init()) == sorted(topics.all())
        assert await log.init() == []
        assert await (await open_log()).init() == []  # another instance, same store
        for topic in topics.all():
            parts = await log.inspection.partitions(topic)
            assert parts and parts == sorted(set(parts)) and parts[0] == 0
            assert set((await log.inspection.end_offsets(topic)).values()) == {0}

    # -- consuming ------------------------------------------------------------------------

    async def test_a_group_reads_everything_in_order_per_key(
        self, log: EventLog, topics: Topics
    ) -> None:
        keys = ["a-1", "a-2", "b.3", "c:4", "d_5-x"]
        sent = records(topics.lifecycle, keys, 20)
        await log.append(sent[:50])
        await log.append(sent[50:])
        n = len(await log.inspection.partitions(topics.lifecycle))
        async with log.consumer("readers", [topics.lifecycle]) as consumer:
            got = await drain(consumer, len(sent))
        assert len(got) == len(sent)
        assert len(set(positions(got))) == len(got)
        assert by_key(got) == by_key(Record(r.topic, 0, 0, r.key, r.value) for r in sent)
        for rec in got:
            assert rec.topic == topics.lifecycle
            assert rec.partition == log.partition_for(rec.key or "", n)
        per_partition: dict[int, list[int]] = defaultdict(list)
        for rec in got:
            per_partition[rec.partition].append(rec.offset)
        assert all(offs == sorted(offs) for offs in per_partition.values())

    async def test_committed_offsets_survive_a_restart(
        self, log: EventLog, topics: Topics, open_log: Callable[[], Awaitable[EventLog]]
    ) -> None:
        await log.append(records(topics.lifecycle, ["only"], 10))
        async with log.consumer("resumer", [topics.lifecycle]) as first:
            got = await drain(first, 10)
            done = next_offsets(got[:6])
            await first.commit(done)
            assert await first.committed() == done
        (tp, offset), *_ = done.items()
        assert await log.inspection.group_offsets("resumer", topics.lifecycle) == {tp[1]: offset}

        restarted = await open_log()  # a new process on the same store
        async with restarted.consumer("resumer", [topics.lifecycle]) as second:
            rest = await drain(second, 4)
        assert [r.value for r in rest] == [r.value for r in got[6:]]
        assert [r.offset for r in rest] == [r.offset for r in got[6:]]

    @pytest.mark.parametrize("transactional", [False, True], ids=["plain", "transactional"])
    async def test_commit_appends_outputs_and_moves_offsets(
        self, log: EventLog, topics: Topics, transactional: bool
    ) -> None:
        await log.append(records(topics.probe_requests, ["p-1", "p-2"], 3, tag="in"))
        worker = log.consumer("worker", [topics.probe_requests], transactional=transactional)
        async with worker:
            inputs = await drain(worker, 6)
            outputs = [OutRecord(topics.lifecycle, r.key or "", b"out:" + r.value) for r in inputs]
            await worker.commit(next_offsets(inputs), outputs)
        offsets = await log.inspection.group_offsets("worker", topics.probe_requests)
        assert offsets == {p: o for (_, p), o in next_offsets(inputs).items()}

        async with log.consumer("auditor", [topics.lifecycle]) as auditor:
            seen = await drain(auditor, 6)
        assert sorted(r.value for r in seen) == sorted(o.value for o in outputs)
        assert by_key(seen) == by_key(Record(o.topic, 0, 0, o.key, o.value) for o in outputs)

        async with log.consumer("worker", [topics.probe_requests]) as again:
            assert await until_assigned(again) == []
            assert await again.poll(timeout=0.5) == []  # nothing left for the group

    async def test_two_groups_each_see_everything(self, log: EventLog, topics: Topics) -> None:
        sent = records(topics.lifecycle, [f"k{i}" for i in range(6)], 5)
        await log.append(sent)
        async with (
            log.consumer("projector", [topics.lifecycle]) as one,
            log.consumer("telemetry", [topics.lifecycle]) as two,
        ):
            first, second = await asyncio.gather(drain(one, 30), drain(two, 30))
        assert sorted(positions(first)) == sorted(positions(second))
        assert sorted(r.value for r in first) == sorted(r.value for r in sent)

    async def test_a_consumer_of_several_topics_gets_each(
        self, log: EventLog, topics: Topics
    ) -> None:
        await log.append(
            records(topics.lifecycle, ["x"], 2) + records(topics.probe_requests, ["x"], 3)
        )
        async with log.consumer("both", [topics.lifecycle, topics.probe_requests]) as consumer:
            got = await drain(consumer, 5)
        assert sorted(r.topic for r in got) == sorted(
            [topics.lifecycle] * 2 + [topics.probe_requests] * 3
        )

    async def test_lag_counts_what_poll_has_not_returned(
        self, log: EventLog, topics: Topics
    ) -> None:
        await log.append(records(topics.lifecycle, ["lagging"], 10))
        async with log.consumer("slow", [topics.lifecycle]) as consumer:
            got: list[Record] = []

            async def four() -> int:
                got.extend(await consumer.poll(max_records=4 - len(got), timeout=0.5))
                return len(got)

            await eventually(four, until=lambda n: n >= 4, timeout=WAIT, interval=0)
            assert len(got) == 4
            assert await consumer.lag() == 6
            got.extend(await drain(consumer, 6))
            assert await consumer.lag() == 0

    # -- assignment -----------------------------------------------------------------------

    async def test_on_assign_runs_before_records_and_can_seek(
        self, log: EventLog, topics: Topics
    ) -> None:
        await log.append(records(topics.lifecycle, ["stored"], 10))
        everything = await read_all(log, topics.lifecycle)
        stored = everything[6].offset  # e.g. kept by a projection with its rows
        calls: list[tuple[str, list[TopicPartition]]] = []

        async def on_assign(consumer: Consumer, tps: Sequence[TopicPartition]) -> None:
            calls.append(("assign", list(tps)))
            for tp in tps:
                if tp == (topics.lifecycle, everything[0].partition):
                    consumer.seek(tp, stored)

        async def on_revoke(consumer: Consumer, tps: Sequence[TopicPartition]) -> None:
            calls.append(("revoke", list(tps)))

        consumer = log.consumer(
            "seeker", [topics.lifecycle], on_assign=on_assign, on_revoke=on_revoke
        )
        async with consumer:
            got: list[Record] = []

            async def polled() -> int:
                batch = await consumer.poll(timeout=0.5)
                if batch and not calls:
                    pytest.fail("records were returned before on_assign ran")
                got.extend(batch)
                return len(got)

            await eventually(polled, until=lambda n: n >= 4, timeout=WAIT, interval=0)
            got.extend(await consumer.poll(timeout=0.3))
            assigned = sorted(consumer.assignment())
        assert [r.value for r in got] == [r.value for r in everything[6:]]
        assert calls[0] == ("assign", assigned)
        assert (topics.lifecycle, everything[0].partition) in assigned
        assert calls[-1] == ("revoke", assigned), "on_revoke runs when the consumer stops"

    async def test_on_revoke_can_commit_what_was_finished(
        self, log: EventLog, topics: Topics
    ) -> None:
        await log.append(records(topics.lifecycle, ["revoked"], 5))
        finished: list[Record] = []

        async def on_revoke(consumer: Consumer, tps: Sequence[TopicPartition]) -> None:
            await consumer.commit(next_offsets(finished))

        async with log.consumer("tidy", [topics.lifecycle], on_revoke=on_revoke) as consumer:
            finished.extend(await drain(consumer, 5))
        last = finished[-1]
        assert await log.inspection.group_offsets("tidy", topics.lifecycle) == {
            last.partition: last.offset + 1
        }

    async def test_an_error_in_on_assign_is_raised_by_poll(
        self, log: EventLog, topics: Topics
    ) -> None:
        await log.append(records(topics.lifecycle, ["x"], 1))

        async def on_assign(consumer: Consumer, tps: Sequence[TopicPartition]) -> None:
            raise RuntimeError("cannot rebuild state")

        async def polled_nothing() -> bool:
            if got := await consumer.poll(timeout=0.2):
                pytest.fail(f"records were returned although on_assign failed: {got}")
            return False  # keep polling until poll() raises

        async with log.consumer("broken", [topics.lifecycle], on_assign=on_assign) as consumer:
            with pytest.raises(RuntimeError, match="cannot rebuild state"):
                await eventually(
                    polled_nothing,
                    timeout=WAIT,
                    interval=0,
                    message="poll() to raise the error of on_assign",
                )

    # -- records --------------------------------------------------------------------------

    async def test_keys_headers_and_values_round_trip(self, log: EventLog, topics: Topics) -> None:
        sent = OutRecord(
            topics.lifecycle,
            "org-1:audit_2.x-3",
            b"\x00\xff binary \xc3\xa9",
            (("event-type", b"AuditStarted"), ("schema-version", b"1"), ("empty", b"")),
        )
        before = int(time.time() * 1000) - 60_000
        await log.append([sent])
        (got,) = await read_all(log, topics.lifecycle)
        assert (got.key, got.value, got.headers) == (sent.key, sent.value, sent.headers)
        assert got.timestamp_ms >= before

    async def test_binary_header_values_round_trip(self, log: EventLog, topics: Topics) -> None:
        headers = (("raw", bytes([0, 159, 255, 128])),)
        await log.append([OutRecord(topics.lifecycle, "k", b"v", headers)])
        (got,) = await read_all(log, topics.lifecycle)
        assert got.headers == headers

    async def test_an_encoded_event_decodes_to_itself(self, log: EventLog, topics: Topics) -> None:
        event = AuditStarted(
            event_id=uuid.uuid4(),
            audit_id="a-123",
            occurred_at=datetime(2026, 11, 30, 8, 0, tzinfo=UTC),
            producer="crawler",
            data=AuditStartedData(project_id="p-1", workflow_instance_id="wf-1"),
        )
        await log.append([encode(topics.lifecycle, event)])
        (got,) = await read_all(log, topics.lifecycle)
        assert got.key == "a-123"
        assert dict(got.headers) == {"event-type": b"AuditStarted", "schema-version": b"2"}
        assert decode(got.value) == event

    async def test_a_dead_letter_keeps_the_original_and_the_reason(
        self, log: EventLog, topics: Topics
    ) -> None:
        await log.append([OutRecord(topics.lifecycle, "a-9", b"\xffnot json")])
        async with log.consumer("strict", [topics.lifecycle]) as consumer:
            (bad,) = await drain(consumer, 1)
            with pytest.raises(DecodeError) as err:
                decode(bad.value)
            letter = dead_letter(topics, bad, "strict", str(err.value))
            await consumer.commit(next_offsets([bad]), [letter])
        (got,) = await read_all(log, topics.dead_letter)
        body = json.loads(got.value)
        origin = f"{bad.topic}/{bad.partition}@{bad.offset}"
        assert got.key == f"{bad.topic}:{bad.partition}:{bad.offset}"  # the source position
        assert dict(got.headers) == {"consumer": b"strict", "dead-letter-of": origin.encode()}
        assert body["key"] == "a-9"
        assert body["reasons"] == [{"consumer": "strict", "error": body["error"]}]
        assert body["source_topic"] == topics.lifecycle
        assert (body["source_partition"], body["source_offset"]) == (bad.partition, bad.offset)
        assert base64.b64decode(body["original_base64"]) == b"\xffnot json"
        assert body["consumer"] == "strict"
        assert "JSON" in body["error"]
        assert await log.inspection.group_offsets("strict", topics.lifecycle) == {
            bad.partition: bad.offset + 1
        }

    # -- lifecycle ------------------------------------------------------------------------

    async def test_ping_start_and_stop(self, log: EventLog, topics: Topics) -> None:
        await log.ping()
        await log.start()  # idempotent
        await log.ping()
        consumer = log.consumer("short-lived", [topics.lifecycle])
        await consumer.start()
        await consumer.start()
        await consumer.stop()
        await consumer.stop()
        await log.stop()
        await log.stop()
        with pytest.raises(EventLogError):
            await log.ping()
        await log.start()  # a stopped log starts again
        await log.ping()
        assert await log.init() == []
