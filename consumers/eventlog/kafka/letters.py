"""Setting records aside on the Kafka log (the dead-letter port, documented in
``eventlog/letters.py``).

The letters of one source partition are set aside in one transaction of a producer whose
``transactional_id`` names that partition (``"{client_id}-dead-letters-{topic}-{partition}"``),
started anew for each step: starting it fences any other producer of that id (another process
setting aside a record of the same partition) and makes the broker finish that producer's
transaction first. The look that follows reads the dead-letter partitions the letters' keys
fall in (``read_committed``) once every transaction begun on them before has ended
(``watermarks.py``): the commit markers of that producer's transaction land a moment after
its commit, and another source partition's transaction open on the same partition holds back
what a ``read_committed`` reader sees, however long ago the letters behind it were committed;
so it sees every letter set aside before. After its commit a step waits the same way, so that
what it set aside is readable when :meth:`KafkaDeadLetters.set_aside` returns. Either wait
gives up after the log's ``request_timeout_ms`` with a retriable error (a transaction left
open by a producer that died stays open until the broker aborts it). A producer fenced
in turn by a later one fails its commit; the step is then taken again, from the look, after a
random wait that grows with each try (a retriable error after :data:`ATTEMPTS`). In this
process, steps of one source partition take turns (a lock), so its own consumers never fence
one another.

Dead letters are rare: a step costs a producer's start, a few ``ListOffsets`` requests and a
read of a dead-letter partition, which ``auditrec dead-letters purge`` keeps short.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Protocol

from aiokafka import AIOKafkaProducer
from aiokafka.errors import InvalidProducerEpoch, ProducerFenced, UnknownError

from consumers.eventlog.dead_letters import LETTER_HEADER, settle
from consumers.eventlog.kafka.errors import translate
from consumers.eventlog.kafka.inspection import KafkaInspection
from consumers.eventlog.kafka.records import key_hash, send_all
from consumers.eventlog.kafka.watermarks import wait_stable
from consumers.eventlog.letters import DeadLetterBox
from consumers.eventlog.values import OutRecord, Record, TopicPartition
from statemachine.errors import EventLogError

__all__ = ["KafkaDeadLetters"]

ATTEMPTS = 8  # steps fenced by another process's before giving up (retriable)
BACKOFF = 0.05  # seconds: a fenced step waits up to this, doubled each time, then looks again
# An EndTxn the broker answers with an unknown error (-1) when another producer of the id
# takes over mid-commit is the same race as a fence: looked at again, like one.
_FENCED = (ProducerFenced, InvalidProducerEpoch, UnknownError)


class LetterClients(Protocol):
    client_id: str
    transaction_timeout_ms: int
    request_timeout_ms: int

    def _started(self) -> tuple[Any, ...]: ...

    def _new_producer(self, **options: Any) -> AIOKafkaProducer: ...

    async def _close(self, *clients: Any) -> None: ...


def _fenced(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was translated from) says another producer took over."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, _FENCED):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class _Fenced(Exception):
    pass


def _collect(producer: AIOKafkaProducer) -> None:
    """Mark the failure a fenced producer leaves on futures nobody waits for (its
    transaction's waiter, its batches' drain waiters) as seen: asyncio would report each when
    collected."""
    waiters = [getattr(getattr(producer, "_txn_manager", None), "_transaction_waiter", None)]
    accumulator = getattr(producer, "_message_accumulator", None)
    for batches in getattr(accumulator, "_batches", {}).values():
        waiters.extend(getattr(b, "_drain_waiter", None) for b in batches)
    waiters.extend(
        getattr(b, "_drain_waiter", None) for b in getattr(accumulator, "_pending_batches", ())
    )
    for waiter in waiters:
        if isinstance(waiter, asyncio.Future) and waiter.done() and not waiter.cancelled():
            waiter.exception()


def _source(letter: OutRecord) -> TopicPartition:
    header = next(v for k, v in letter.headers if k == LETTER_HEADER).decode()
    where, _, _ = header.rpartition("@")
    topic, _, partition = where.rpartition("/")
    return topic, int(partition)


class KafkaDeadLetters(DeadLetterBox):
    def __init__(self, log: LetterClients, inspection: KafkaInspection) -> None:
        self.log = log
        self.inspection = inspection
        self._turns: defaultdict[TopicPartition, asyncio.Lock] = defaultdict(asyncio.Lock)
        # seconds a step waits for the transactions open on a dead-letter partition to end
        self.stable_within = log.request_timeout_ms / 1000

    async def set_aside(self, letters: Sequence[OutRecord]) -> int:
        self.log._started()  # a stopped log refuses, as its other ports do
        by_source: dict[TopicPartition, list[OutRecord]] = defaultdict(list)
        for letter in letters:
            by_source[_source(letter)].append(letter)
        written = await asyncio.gather(*(self._step(s, ls) for s, ls in by_source.items()))
        return sum(written)

    async def _step(self, source: TopicPartition, letters: list[OutRecord]) -> int:
        async with self._turns[source]:
            for attempt in range(ATTEMPTS - 1):
                try:
                    return await self._once(source, letters)
                except _Fenced:  # another process's step came in between: look again, after
                    # a random wait, so that two processes fencing each other fall apart
                    await asyncio.sleep(random.uniform(0, BACKOFF * 2**attempt))
            try:
                return await self._once(source, letters)
            except _Fenced as exc:
                raise EventLogError(
                    f"Kafka: set aside dead letters of {source[0]}/{source[1]}: fenced "
                    f"{ATTEMPTS} times by other processes",
                    retriable=True,
                ) from exc

    async def _stable(self, topic: str, partitions: Sequence[int], where: str) -> None:
        _, admin, _ = self.log._started()
        with translate(where):
            await wait_stable(admin, topic, partitions, timeout=self.stable_within)

    async def _held(self, topic: str, partition: int, where: str) -> list[Record]:
        await self._stable(topic, [partition], where)  # every letter committed is readable
        out: list[Record] = []
        async for batch in self.inspection.read(topic, partition, 0):
            out.extend(batch)
        return out

    async def _once(self, source: TopicPartition, letters: list[OutRecord]) -> int:
        where = f"set aside dead letters of {source[0]}/{source[1]}"
        producer = self.log._new_producer(
            transactional_id=f"{self.log.client_id}-dead-letters-{source[0]}-{source[1]}",
            transaction_timeout_ms=self.log.transaction_timeout_ms,
        )
        try:
            try:
                with translate(where):
                    await producer.start()  # fences the id's other producers, ends their txn
            except EventLogError as exc:
                if _fenced(exc):
                    raise _Fenced(str(exc)) from exc
                raise
            held: dict[tuple[str, int], dict[str, list[Record | OutRecord]]] = {}
            out: list[OutRecord] = []
            written: set[tuple[str, int]] = set()  # the dead-letter partitions appended to
            partitions: dict[str, list[int]] = {}
            for letter in letters:
                if letter.topic not in partitions:
                    partitions[letter.topic] = await self.inspection.partitions(letter.topic)
                ids = partitions[letter.topic]
                at = (letter.topic, ids[key_hash(letter.key.encode()) % len(ids)])
                if at not in held:
                    held[at] = defaultdict(list)
                    for record in await self._held(*at, where):
                        if record.key is not None:
                            held[at][record.key].append(record)
                under_key = held[at][letter.key]
                settled = settle(under_key, letter)
                if settled is not None:
                    out.append(settled)
                    under_key.append(settled)
                    written.add(at)
            if not out:
                return 0
            try:
                with translate(where):
                    await producer.begin_transaction()
                    await send_all(producer, out)
                    await producer.commit_transaction()
            except BaseException as exc:
                if _fenced(exc):
                    raise _Fenced(str(exc)) from exc
                if producer._txn_manager.state.name in ("IN_TRANSACTION", "ABORTABLE_ERROR"):
                    with contextlib.suppress(Exception):  # else the broker aborts it in time
                        await producer.abort_transaction()
                raise
            for topic, partition in sorted(written):  # readable once set_aside returns
                await self._stable(topic, [partition], where)
            return len(out)
        finally:
            _collect(producer)
            await self.log._close(producer)
            _collect(producer)
