"""The consumer side of the Kafka event log: group members, rebalancing and commits.

Deviations and choices (the port is documented in ``eventlog/port.py``; the log itself, its topics
and its producer, in ``log.py``):

- Consumers read ``read_committed`` (set in ``log.py``): they never see the outputs of
  an aborted transaction.
- Rebalancing is eager: every rebalance revokes all of a member's partitions (``on_revoke``)
  and then assigns the new set (``on_assign``). An exception in either callback is raised by
  the next :meth:`Consumer.poll`.
- A ``transactional`` consumer owns one transactional producer per assigned input partition
  (``transactions.py``), with the stable ``transactional_id``
  ``"{client_id}-{group}-{topic}-{partition}"`` (the
  classic exactly-once design before KIP-447, which aiokafka's group-id-only
  ``send_offsets_to_transaction`` does not support). A new owner of a partition starts its
  producer *before* its ``on_assign`` reads committed offsets: that fences the previous owner
  (a crashed or zombie member can no longer commit) and makes the broker finish or abort the
  previous owner's open transaction first. So whoever rebuilds from the committed offsets sees
  every committed output, and no output is committed twice. A transactional commit therefore
  covers exactly one input partition (``commit`` refuses more); components commit per
  partition, concurrently. :meth:`commit` also refuses offsets of partitions this member no
  longer holds.
- With ``AUDITREC_INSTANCE_ID`` set, members join as static members (KIP-345,
  ``group.instance.id``): a process restarted under the same identity within the session
  timeout gets its partitions back at once, and the rest of the group is not rebalanced. A
  static member does not leave its groups when it stops, so its partitions move to the others
  only when its session expires; two live processes must never share an identity (the broker
  fences the older one).
- Non-transactional :meth:`Consumer.commit` appends the outputs, then commits the offsets:
  a crash in between redelivers the inputs (at-least-once, like any Kafka consumer).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.structs import TopicPartition as KafkaTP

from consumers.eventlog.kafka.errors import translate
from consumers.eventlog.kafka.fetching import records
from consumers.eventlog.kafka.inspection import KafkaInspection
from consumers.eventlog.kafka.transactions import PartitionTransactions, ProducerSource
from consumers.eventlog.letters import DeadLetterBox, is_dead_letter
from consumers.eventlog.port import AssignCallback, Consumer, OutRecord, Record, TopicPartition
from statemachine.errors import EventLogError

__all__ = ["KafkaConnection", "KafkaConsumer"]


class KafkaConnection(ProducerSource, Protocol):
    """What a consumer uses of the log that made it (:class:`~consumers.eventlog.kafka.log.
    KafkaEventLog`): its clients' settings, producers, committed offsets (its inspection
    port), and its registry of live consumers."""

    instance_id: str | None
    _consumers: set[KafkaConsumer]

    def _started(self) -> tuple[Any, ...]: ...

    def _new_consumer(self, group: str | None, **options: Any) -> AIOKafkaConsumer: ...

    @property
    def inspection(self) -> KafkaInspection: ...

    @property
    def dead_letters(self) -> DeadLetterBox: ...

    async def append(self, records: Sequence[OutRecord]) -> None: ...


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, owner: KafkaConsumer) -> None:
        self.owner = owner

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self.owner._call(self.owner.on_revoke, revoked)
        await self.owner.transactions.drop((tp.topic, tp.partition) for tp in revoked)

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
        log: KafkaConnection,
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
        self.transactions = PartitionTransactions(log, group, lambda: self._consumer is not None)
        self._callback_error: BaseException | None = None

    async def _fence(self, assigned: Any) -> None:
        """Start the producers of newly assigned partitions (fencing their previous owners)."""
        if self.transactional:
            await self.transactions.fence((tp.topic, tp.partition) for tp in assigned)

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
        static = {"group_instance_id": log.instance_id} if log.instance_id else {}
        consumer = log._new_consumer(self.group, **static)
        consumer.subscribe(self.topics, listener=_Listener(self))
        self._consumer = consumer  # the group may assign partitions during start()
        try:
            with translate(f"start consumer of group {self.group} on {self.topics}"):
                await consumer.start()
        except BaseException:
            self._consumer = None
            await self.transactions.close()
            await log._close(consumer)
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
            await self.transactions.close()
            await self.log._close(consumer)

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
        with translate(f"poll group {self.group} on {self.topics}"):
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
            out.extend(records(msgs))
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
            if any(is_dead_letter(o) for o in outputs):  # kept once, before the offsets move
                await self.log.dead_letters.set_aside([o for o in outputs if is_dead_letter(o)])
                outputs = [o for o in outputs if not is_dead_letter(o)]
            if not positions and not outputs:
                return
            if len(offsets) != 1:
                raise EventLogError(
                    f"Kafka: {where}: a transactional commit covers exactly one input partition",
                    retriable=False,
                )
            [tp] = offsets
            await self.transactions.commit(tp, positions, outputs, where)
            return
        if outputs:
            await self.log.append(outputs)
        if positions:
            with translate(where):
                await consumer.commit(positions)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        with translate(f"seek {tp[0]}/{tp[1]} to {offset}"):
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
            mine = [p for t, p in assigned if t == topic]
            # Not a stable read: the previous owners' transactions were fenced on assignment,
            # and an offset still shown pending (seen after a broker restart) must not hold
            # the assignment up. An offset read too old costs a re-read, never a duplicate:
            # the reconciler also applies its own decisions found past the committed offset.
            for partition, offset in (
                await self.log.inspection.committed_offsets(self.group, topic, mine, stable=False)
            ).items():
                out[(topic, partition)] = offset
        return out

    async def lags(self) -> dict[TopicPartition, int]:
        consumer = self._running()
        tps = list(consumer.assignment())
        if not tps:
            return {}
        with translate(f"lag of group {self.group}"):
            ends = await consumer.end_offsets(tps)
            return {
                (tp.topic, tp.partition): max(0, ends[tp] - await consumer.position(tp))
                for tp in tps
            }
