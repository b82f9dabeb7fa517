"""The embedded event log passes the contract of the log and of each of its ports; plus what only SQLite promises: a group's
partitions belong to one member at a time (a lease), and several processes share one file."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from consumers.eventlog.port import EventLog, Topics
from consumers.eventlog.sqlite.log import SQLiteEventLog
from statemachine.errors import EventLogError
from tests.contracts.eventlog import (
    EventLogContract,
    EventLogFixtures,
    LogFactory,
    drain,
    next_offsets,
    records,
)
from tests.contracts.eventlog_dead_letters import DeadLetterBoxContract
from tests.contracts.eventlog_inspection import LogInspectionContract
from tests.contracts.eventlog_retention import LogRetentionContract


class SQLite(EventLogFixtures):
    """A fresh file per test."""

    @pytest.fixture
    def make_log(self, tmp_path: Path) -> LogFactory:
        url = f"sqlite:///{tmp_path}/events.db"

        async def make(topics: Topics) -> EventLog:
            log = SQLiteEventLog(url, topics)
            await log.start()
            return log

        return make


class TestSQLiteEventLog(SQLite, EventLogContract):
    pass


class TestSQLiteInspection(SQLite, LogInspectionContract):
    pass


class TestSQLiteRetention(SQLite, LogRetentionContract):
    pass


class TestSQLiteDeadLetters(SQLite, DeadLetterBoxContract):
    pass


@pytest.fixture
async def log(tmp_path: Path) -> AsyncIterator[SQLiteEventLog]:
    topics = Topics(prefix="only")
    log = SQLiteEventLog(f"sqlite:///{tmp_path}/events.db", topics)
    await log.start()
    await log.init()
    yield log
    await log.stop()


async def run_python(code: str, *args: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, *args, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()


_PRELUDE = """
import asyncio, os, sys
from consumers.eventlog.port import OutRecord, Topics
from consumers.eventlog.sqlite.log import SQLiteEventLog
log = SQLiteEventLog(sys.argv[1], Topics(prefix="only"))
"""


async def test_one_member_of_a_group_holds_the_lease(log: SQLiteEventLog) -> None:
    topic = log.topics.lifecycle
    await log.append(records(topic, ["a-1"], 10))
    holder = log.consumer("projector", [topic])
    waiting = log.consumer("projector", [topic])
    async with waiting:
        async with holder:
            first = await holder.poll(max_records=3)
            assert [r.offset for r in first] == [0, 1, 2]
            await holder.commit(next_offsets(first))
            assert await waiting.poll(timeout=0.3) == []
            assert waiting.assignment() == frozenset()
            assert holder.assignment() == {(topic, 0)}
        # the holder stopped: the other member takes over from the committed offset
        rest = await drain(waiting, 7)
        assert [r.offset for r in rest] == list(range(3, 10))
        assert waiting.assignment() == {(topic, 0)}


async def test_records_appended_by_another_process_arrive(log: SQLiteEventLog) -> None:
    topic = log.topics.lifecycle
    async with log.consumer("tail", [topic]) as consumer:
        assert await consumer.poll(timeout=0.2) == []
        append = _PRELUDE + (
            "async def main():\n"
            "    await log.start()\n"
            f"    out = [OutRecord({topic!r}, 'a-2', b'from-%d' % i) for i in range(5)]\n"
            "    await log.append(out)\n"
            "    await log.stop()\n"
            "asyncio.run(main())\n"
        )
        writer = asyncio.create_task(run_python(append, log.url))
        got = await drain(consumer, 5)
        await writer
    assert [r.value for r in got] == [b"from-%d" % i for i in range(5)]


async def test_the_lease_of_a_dead_process_is_taken_over(log: SQLiteEventLog) -> None:
    topic = log.topics.lifecycle
    await log.append(records(topic, ["a-3"], 4))
    crash = _PRELUDE + (
        "async def main():\n"
        "    await log.start()\n"
        f"    consumer = log.consumer('reconciler', [{topic!r}])\n"
        "    await consumer.start()\n"
        "    assert len(await consumer.poll()) == 4\n"
        "    os._exit(0)  # killed while holding the lease\n"
        "asyncio.run(main())\n"
    )
    await run_python(crash, log.url)
    async with log.consumer("reconciler", [topic]) as consumer:
        got = await drain(consumer, 4, timeout=5)  # well before the lease would expire
    assert [r.offset for r in got] == [0, 1, 2, 3]


async def test_a_commit_after_losing_the_lease_is_refused(log: SQLiteEventLog) -> None:
    topic = log.topics.lifecycle
    await log.append(records(topic, ["a-4"], 2))
    async with log.consumer("g", [topic]) as consumer:
        got = await drain(consumer, 2)
        await consumer.stop()  # releases the lease
        await consumer.start()
        with pytest.raises(EventLogError, match="lost its lease"):
            await consumer.commit(next_offsets(got))
    assert await log.inspection.group_offsets("g", topic) == {}
