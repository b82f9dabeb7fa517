"""The transactional producers of one member of a consumer group: one per assigned input
partition, with the stable ``transactional_id`` ``"{client_id}-{group}-{topic}-{partition}"``
(why, in ``consumer.py``). A partition's producer is started when it is assigned, which fences
its previous owner; it is closed when the partition is revoked; each commit of the partition is
one transaction of its outputs and its offset, aborted when anything fails.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from aiokafka import AIOKafkaProducer
from aiokafka.structs import TopicPartition as KafkaTP

from consumers.eventlog.kafka.errors import translate
from consumers.eventlog.kafka.records import send_all
from consumers.eventlog.port import OutRecord, TopicPartition
from statemachine.errors import EventLogError

__all__ = ["PartitionTransactions", "ProducerSource"]


class ProducerSource(Protocol):
    """What the transactions use of the log: its producers and their settings."""

    client_id: str
    transaction_timeout_ms: int
    request_timeout_ms: int

    def _new_producer(self, **options: Any) -> AIOKafkaProducer: ...

    async def _close(self, *clients: Any) -> None: ...


class PartitionTransactions:
    """The producers of a member of ``group``, by input partition; ``running`` tells whether
    the member still runs (a producer started after it stopped is closed at once)."""

    def __init__(self, log: ProducerSource, group: str, running: Callable[[], bool]) -> None:
        self.log = log
        self.group = group
        self.running = running
        self.producers: dict[TopicPartition, AIOKafkaProducer] = {}

    def transactional_id(self, tp: TopicPartition) -> str:
        return f"{self.log.client_id}-{self.group}-{tp[0]}-{tp[1]}"

    async def fence(self, tps: Iterable[TopicPartition]) -> None:
        """Start the producers of newly assigned partitions (fencing their previous owners)."""
        await asyncio.gather(*(self.producer(tp) for tp in tps))

    async def drop(self, tps: Iterable[TopicPartition]) -> None:
        """Close the producers of revoked partitions."""
        await self.log._close(*(self.producers.pop(tp, None) for tp in tps))

    async def close(self) -> None:
        """Close every producer (the member stops)."""
        producers, self.producers = list(self.producers.values()), {}
        await self.log._close(*producers)

    async def producer(self, tp: TopicPartition) -> AIOKafkaProducer:
        producer = self.producers.get(tp)
        if producer is None:
            producer = self.log._new_producer(
                transactional_id=self.transactional_id(tp),
                transaction_timeout_ms=self.log.transaction_timeout_ms,
            )
            try:
                with translate(f"start transactional producer for {tp[0]}/{tp[1]}"):
                    await producer.start()
            except BaseException:
                await self.log._close(producer)
                raise
            if not self.running():  # stopped while the producer was starting
                await self.log._close(producer)
                raise EventLogError(f"consumer of group {self.group} stopped", retriable=True)
            self.producers[tp] = producer
        return producer

    async def commit(
        self,
        tp: TopicPartition,
        positions: dict[KafkaTP, int],
        outputs: Sequence[OutRecord],
        where: str,
    ) -> None:
        """One transaction of partition ``tp``: ``outputs``, then its offset."""
        with translate(where):
            producer = await self.producer(tp)
        try:
            with translate(where):
                await producer.begin_transaction()
                await send_all(producer, outputs)
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
            if self.producers.get(tp) is producer:
                del self.producers[tp]
            await self.log._close(producer)
