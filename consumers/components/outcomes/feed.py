"""One endpoint's outcome feed: a consumer group of its own on the lifecycle topic that folds
every audit, makes the entry of each status change (:func:`statemachine.outcomes.outcome`) and
delivers it to its endpoint.

**Exactly once at the source.** Entries come from folding the log, not from a table written
beside it: the same events give the same entries, with the same ids and the same bytes, however
often they are folded (a restart, a rebalance, a rebuild from a checkpoint). An endpoint
receives the entries of events recorded after it was first registered
(:meth:`~projections.deliveries.OutcomeDeliveries.register`), not the whole history before it.

**At least once on the wire.** A partition's offset is committed only up to its oldest entry
not yet delivered (:class:`~consumers.components.folding.Folding`), so an entry in flight when
the process dies is folded and sent again, with the same id and body.

**Order per audit.** Each audit's entries wait in a queue of their own; only its head is sent,
and the next only once the head is delivered. Other audits go on meanwhile (up to the sender's
concurrency), so one audit's failing entry never holds back another's. A failed attempt is
retried after an exponential back-off with jitter (1 s doubling up to 5 min, each wait between
half and all of that); once ``retry_for`` has passed since its event was recorded (a time the
log keeps, so a restart does not start the window again) and it has failed at least
:data:`MIN_ATTEMPTS` times here, the entry is parked in the store with every entry of its audit
waiting behind it, and every later entry of that audit is parked behind them as it comes, until
an operator's retry delivers them (:mod:`projections.deliveries`). A retried entry gets one
attempt: failing again, it is parked again; delivered, it leaves the store before the next
entry of its audit is sent. When its partitions are revoked, the feed waits (up to the sender's
deadline) for the sends in flight from them to end before the next owner reads them, so an
older entry can never land after a newer one.

**Never blocking the pipeline.** Each endpoint has its own group: a slow or dead endpoint lags
only its own feed. A poll reads no more records than there is room left for entries; once
``max_waiting`` entries wait in memory, the feed reads no more (it keeps polling, one record at
a time put back, so its group membership stays alive) until some are delivered or parked. A
step that fails (the store down while parking) commits nothing more until the component
restarts.

Metrics: ``auditrec_outcomes_total{endpoint,result}``, ``auditrec_outcomes_waiting``,
``auditrec_outcomes_parked``, ``auditrec_outcome_delay_seconds``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog

from consumers.components.folding import Folding
from consumers.components.keys import Keys, first_seen, kept, settled
from consumers.components.outcomes.senders import Sender
from consumers.eventlog.codec import read
from consumers.eventlog.port import Consumer, EventLog, OutRecord, Record, TopicPartition
from consumers.runtime.endpoints import Endpoint
from consumers.runtime.metrics import OUTCOME_DELAY, OUTCOMES, OUTCOMES_PARKED, OUTCOMES_WAITING
from projections.store import ProjectionStore
from projections.values import ParkedEntry
from statemachine.errors import DecodeError
from statemachine.events import AuditEvent
from statemachine.machine import TERMINAL
from statemachine.outcomes import outcome
from statemachine.state import AuditState, evolve, initial

__all__ = ["Feed", "Pending"]

log = structlog.get_logger("auditrec.outcomes")

BACKOFF_BASE = 1.0
BACKOFF_CAP = 300.0
MAX_RECORDS = 5000  # records a poll reads at most (fewer as the room left shrinks)
MIN_ATTEMPTS = 3  # failed attempts in this process before an entry past its window is parked

_COMPACT: dict[tuple[str, str | None], AuditState] = {}


def _compact(state: AuditState) -> AuditState:
    """A terminal audit that may still change, kept as what its next change reads: its status
    and who failed it (one shared state for each; its audit id is the dictionary's key)."""
    at = (state.status, state.failed_by)
    shared = _COMPACT.get(at)
    if shared is None:
        shared = _COMPACT[at] = AuditState(audit_id="", status=at[0], failed_by=at[1])
    return shared


@dataclass(slots=True)
class Pending:
    """An entry waiting for its endpoint."""

    tp: TopicPartition
    offset: int | None
    """Where its event was read; ``None`` for a parked entry an operator retries."""
    outcome_id: str
    audit_id: str
    body: str
    decided_at: datetime
    recorded: float = 0.0  # time.time() its event was recorded (the log's timestamp)
    attempts: int = 0
    tried: int = 0  # failed attempts in this process
    due: float = 0.0  # time.monotonic() before which it is not tried again
    error: str = ""


class Feed(Folding):
    name = "outcomes"

    def __init__(
        self,
        event_log: EventLog,
        store: ProjectionStore,
        endpoint: Endpoint,
        sender: Sender,
        *,
        retry_for: float,
        max_waiting: int = 10_000,
        retry_poll: float = 2.0,
    ) -> None:
        super().__init__(
            event_log, store, group=event_log.topics.group(f"outcomes-{endpoint.name}")
        )
        self.endpoint = endpoint
        self.sender = sender
        self.deliveries = store.deliveries
        self.retry_for = retry_for
        self.max_waiting = max_waiting
        self.retry_poll = retry_poll
        self.queues: dict[str, deque[Pending]] = {}
        self.blocked: dict[str, int] = {}  # audits with entries parked here -> their partition
        self.retrying: set[str] = set()  # parked entries an operator's retry put in a queue
        self.sending: set[str] = set()  # audits with an entry in flight
        self.tasks: set[asyncio.Task[None]] = set()
        self.registered_ms = 0
        self.delivered = 0
        self._wake = asyncio.Event()
        self._next_poll = 0.0
        self._closing = False
        # Sends in flight: the partitions of their entries, and set once the send has ended.
        self._flights: dict[asyncio.Task[None], tuple[set[TopicPartition], asyncio.Event]] = {}

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        if self.consumer is not None:
            return
        first = await self.deliveries.register(
            self.endpoint.name, self.endpoint.target, datetime.now(UTC)
        )
        self.registered_ms = int(first.timestamp() * 1000)
        self.broken = self._closing = False
        await self.sender.start()
        await super().start()

    async def stop(self) -> None:
        self._closing = True
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        await super().stop()
        await self.sender.stop()
        self.queues.clear()
        self.blocked.clear()
        self.retrying.clear()
        self.sending.clear()
        OUTCOMES_WAITING.labels(self.endpoint.name).set(0)

    @property
    def waiting_count(self) -> int:
        return sum(len(q) for q in self.queues.values())

    # -- folding ------------------------------------------------------------------------------

    @staticmethod
    def fold(
        states: dict[str, AuditState], keys: Keys, event: AuditEvent
    ) -> tuple[AuditState, AuditState] | None:
        """The audit's state before and after ``event``: running audits are kept whole,
        terminal ones that may still change (a failure may be overturned or restored) compact,
        final ones forgotten."""
        if not first_seen(keys, event):
            return None
        audit_id = event.audit_id
        before = states.get(audit_id)
        if before is None:
            before = initial(audit_id)
        elif before.audit_id == "":
            before = before._replace(audit_id=audit_id)
        after = evolve(before, event)
        if after.exists and after.status not in TERMINAL:
            states[audit_id] = after
        elif kept(after):
            states[audit_id] = _compact(after)
        else:
            states.pop(audit_id, None)
        settled(keys, audit_id, after)
        return before, after

    def waiting(self) -> Iterable[tuple[TopicPartition, int]]:
        for queue in self.queues.values():
            for entry in queue:
                if entry.offset is not None:
                    yield entry.tp, entry.offset
                    break  # an audit's entries were read in order: its first is its oldest

    async def on_assign(self, consumer: Consumer, partitions: Sequence[TopicPartition]) -> None:
        await super().on_assign(consumer, partitions)
        for _, partition in partitions:
            for audit_id in await self.deliveries.parked_audits(self.endpoint.name, [partition]):
                self.blocked[audit_id] = partition

    async def on_revoke(self, consumer: Consumer, partitions: Sequence[TopicPartition]) -> None:
        """Wait (bounded) for the sends in flight from ``partitions`` to end: their next owner
        sends those entries again, and must not overtake one still on the wire."""
        gone = set(partitions)
        ends = [done.wait() for tps, done in self._flights.values() if tps & gone]
        if ends:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*ends), self.sender.deadline + 1.0)
        await super().on_revoke(consumer, partitions)

    def forget(self, partitions: set[TopicPartition]) -> None:
        gone = {p for _, p in partitions}
        for audit_id in [a for a, q in self.queues.items() if q and q[0].tp in partitions]:
            for entry in self.queues.pop(audit_id):
                self.retrying.discard(entry.outcome_id)
        for audit_id in [a for a, p in self.blocked.items() if p in gone]:
            del self.blocked[audit_id]
        OUTCOMES_WAITING.labels(self.endpoint.name).set(self.waiting_count)

    # -- the loop -----------------------------------------------------------------------------

    async def step(self) -> int:
        room = self.max_waiting - self.waiting_count
        full = room <= 0
        self.max_records = min(MAX_RECORDS, max(room, 1))  # a record makes one entry at most
        records = await self._poll_held() if full else await self.poll(self._wait())
        async with self.batch_lock:
            mine = self.still_assigned(records) if records else []
            if mine and self._seeks != self.polled_at:
                mine = self.not_sought_since(mine, self.polled_at)
            if full:
                self._put_back(mine)
                mine = []
            try:
                dlq: list[OutRecord] = []
                behind: list[ParkedEntry] = []
                for record in mine:
                    self._take(record, dlq, behind)
                if behind:
                    await self.deliveries.park(behind)
                    OUTCOMES.labels(self.endpoint.name, "parked").inc(len(behind))
                await self._operator_retries()
                self._launch()
                await self.commit_waiting(dlq)
            except BaseException:
                self.broken = True  # what was read is not all parked or queued: commit nothing
                raise
            self.progressed(mine)
            OUTCOMES_WAITING.labels(self.endpoint.name).set(self.waiting_count)
        if full:
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll_timeout)
        return len(mine)

    def _wait(self) -> float:
        """How long a poll may wait for records: until the next retry falls due, at most
        :attr:`poll_timeout` (a retry is sent on time, not at the next poll's end)."""
        if len(self.tasks) >= self.sender.concurrency:
            return self.poll_timeout  # no slot: a send that ends launches the next itself
        due = [q[0].due for a, q in self.queues.items() if q and a not in self.sending]
        if not due:
            return self.poll_timeout
        return min(max(min(due) - time.monotonic(), 0.0), self.poll_timeout)

    async def _poll_held(self) -> list[Record]:
        """A poll while full: at most one record, put back at once (see :meth:`_put_back`);
        it keeps the consumer's group membership alive."""
        assert self.consumer is not None
        records = await self.consumer.poll(1, 0.0)
        self.polled_at = self._seeks
        return records

    def _put_back(self, records: list[Record]) -> None:
        if self.consumer is None:
            return
        first: dict[TopicPartition, int] = {}
        for r in records:
            first.setdefault((r.topic, r.partition), r.offset)
        for tp, offset in first.items():
            self.seek(self.consumer, tp, offset)

    def _take(self, record: Record, dlq: list[OutRecord], behind: list[ParkedEntry]) -> None:
        tp = (record.topic, record.partition)
        self._consumed[tp] = record.offset + 1
        try:
            event = read(record.value)
        except DecodeError as exc:
            self.dead_letter(record, str(exc), dlq)
            return
        try:
            folded = self.folded(tp, event)
        except Exception as exc:  # one event must not hold back its partition
            self.cannot_handle(record, exc, dlq)
            return
        if folded is None or record.timestamp_ms < self.registered_ms:
            return
        entry = outcome(folded[0], event, folded[1])
        if entry is None or not self.endpoint.wants(entry.type):
            return
        pending = Pending(
            tp,
            record.offset,
            entry.id,
            entry.audit_id,
            entry.model_dump_json(),
            entry.decided_at,
            recorded=record.timestamp_ms / 1000,
        )
        if entry.audit_id in self.blocked:
            behind.append(self._parked(pending, "behind an entry of its audit parked before it"))
            return
        self.queues.setdefault(entry.audit_id, deque()).append(pending)

    def _parked(self, entry: Pending, error: str) -> ParkedEntry:
        return ParkedEntry(
            endpoint=self.endpoint.name,
            outcome_id=entry.outcome_id,
            audit_id=entry.audit_id,
            partition=entry.tp[1],
            body=entry.body,
            attempts=entry.attempts,
            error=error,
            parked_at=datetime.now(UTC),
        )

    async def _operator_retries(self) -> None:
        """Every ``retry_poll`` seconds: put the parked entries an operator asked to retry (of
        the partitions held here) in their audits' queues; and refresh the parked gauge."""
        now = time.monotonic()
        if now < self._next_poll or self.consumer is None:
            return
        self._next_poll = now + self.retry_poll
        topic = self.log.topics.lifecycle
        partitions = [p for t, p in self.consumer.assignment() if t == topic]
        if partitions:
            rows = await self.deliveries.retry_requested(self.endpoint.name, partitions, 500)
            for row in rows:
                if row.outcome_id in self.retrying:
                    continue
                self.retrying.add(row.outcome_id)
                self.blocked[row.audit_id] = row.partition
                decided = row.parked_at  # only the delay metric reads it
                self.queues.setdefault(row.audit_id, deque()).append(
                    Pending(
                        (topic, row.partition),
                        None,
                        row.outcome_id,
                        row.audit_id,
                        row.body,
                        decided,
                        attempts=row.attempts,
                    )
                )
        counts = await self.deliveries.parked_counts()
        OUTCOMES_PARKED.labels(self.endpoint.name).set(counts.get(self.endpoint.name, 0))

    def _launch(self) -> None:
        """Start sending the heads that are due, as the sender's concurrency allows."""
        room = self.sender.concurrency - len(self.tasks)
        if room <= 0:
            return
        now = time.monotonic()
        ready = [
            a for a, q in self.queues.items() if q and a not in self.sending and q[0].due <= now
        ]
        if not ready:
            return
        groups = [[a] for a in ready[:room]] if self.sender.batch == 1 else [ready]
        for audits in groups:
            self.sending.update(audits)
            task = asyncio.create_task(self._run(audits))
            self.tasks.add(task)
            task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self._wake.set()
        if not self._closing and not self.batch_lock.locked():
            # A slot is free: fill it now, not at the end of the next poll (a backlog drains
            # at the sender's pace). Under the batch lock the step (or a revocation) is at
            # work, and launches what it may itself.
            self._launch()
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "outcome delivery failed unexpectedly",
                endpoint=self.endpoint.name,
                error=repr(task.exception()),
            )

    async def _run(self, audits: list[str]) -> None:
        """Send the due entries of ``audits`` in order until none is due or one fails."""
        task = asyncio.current_task()
        assert task is not None
        try:
            while True:
                batch = self._batch(audits)
                if not batch:
                    return
                heads: set[str] = set()
                for entry in batch:  # an attempt counts for the head of each audit sent
                    if entry.audit_id not in heads:
                        heads.add(entry.audit_id)
                        entry.attempts += 1
                done = asyncio.Event()
                self._flights[task] = ({e.tp for e in batch}, done)
                try:
                    errors = await self.sender.send(batch)
                except Exception as exc:  # a sender's bug must not stop the feed
                    errors = [f"{type(exc).__name__}: {exc}"] * len(batch)
                finally:
                    done.set()
                async with self.batch_lock:
                    failed = await self._settle(batch, errors)
                if failed:
                    return
        finally:
            self._flights.pop(task, None)
            self.sending.difference_update(audits)
            self._wake.set()

    def _batch(self, audits: list[str]) -> list[Pending]:
        now = time.monotonic()
        batch: list[Pending] = []
        for audit_id in audits:
            queue = self.queues.get(audit_id)
            if not queue or queue[0].due > now:
                continue
            for entry in queue:
                if len(batch) >= self.sender.batch:
                    return batch
                batch.append(entry)
                if self.sender.batch == 1:
                    return batch
        return batch

    async def _settle(self, batch: list[Pending], errors: list[str | None]) -> bool:
        """Record what became of ``batch``; whether an entry failed."""
        name = self.endpoint.name
        failed = False
        stopped: set[str] = set()  # audits whose chain stops at a failed entry here
        for entry, error in zip(batch, errors, strict=True):
            queue = self.queues.get(entry.audit_id)
            if entry.audit_id in stopped or not queue or queue[0] is not entry:
                continue  # behind a failed entry, or its partition was revoked meanwhile
            if error is None:
                if entry.offset is None:  # a parked entry: out of the store before the next
                    entry.due = time.monotonic() + BACKOFF_BASE  # (if the store fails)
                    unblocked = await self.deliveries.delivered(name, [entry.outcome_id])
                    self.retrying.discard(entry.outcome_id)
                    for audit_id in unblocked:
                        self.blocked.pop(audit_id, None)
                else:
                    delay = (datetime.now(UTC) - entry.decided_at).total_seconds()
                    OUTCOME_DELAY.labels(name).observe(max(delay, 0.0))
                queue.popleft()
                if not queue:
                    del self.queues[entry.audit_id]
                self.delivered += 1
                OUTCOMES.labels(name, "delivered").inc()
                continue
            failed = True
            stopped.add(entry.audit_id)
            entry.error = error
            await self._failed(entry, queue)
        return failed

    async def _failed(self, entry: Pending, queue: deque[Pending]) -> None:
        name = self.endpoint.name
        entry.tried += 1
        delay = min(BACKOFF_BASE * 2 ** (entry.tried - 1), BACKOFF_CAP)
        # Set first: a store that fails below must not make the feed hammer the endpoint.
        entry.due = time.monotonic() + delay * (0.5 + random.random() / 2)
        if entry.offset is None:  # an operator's retry: one attempt, then parked again
            await self.deliveries.park_again(
                name, entry.outcome_id, entry.attempts, entry.error, datetime.now(UTC)
            )
            for waiting in self.queues.pop(entry.audit_id, queue):
                self.retrying.discard(waiting.outcome_id)
            OUTCOMES.labels(name, "parked").inc()
            log.warning(
                "outcome retry failed: parked again",
                endpoint=name,
                audit_id=entry.audit_id,
                outcome_id=entry.outcome_id,
                error=entry.error,
            )
            return
        recorded = entry.recorded or time.time()
        if time.time() - recorded < self.retry_for or entry.tried < MIN_ATTEMPTS:
            OUTCOMES.labels(name, "retried").inc()
            log.info(
                "outcome not delivered; will retry",
                endpoint=name,
                audit_id=entry.audit_id,
                outcome_id=entry.outcome_id,
                attempts=entry.attempts,
                error=entry.error,
                retry_in_s=round(entry.due - time.monotonic(), 2),
            )
            return
        parked = [self._parked(entry, entry.error)]
        parked += [
            self._parked(w, "behind an entry of its audit parked before it")
            for w in list(queue)[1:]
        ]
        await self.deliveries.park(parked)
        del self.queues[entry.audit_id]
        self.blocked[entry.audit_id] = entry.tp[1]
        OUTCOMES.labels(name, "parked").inc(len(parked))
        log.error(
            "outcome parked: not delivered in time",
            endpoint=name,
            audit_id=entry.audit_id,
            outcome_id=entry.outcome_id,
            attempts=entry.attempts,
            error=entry.error,
            behind=len(parked) - 1,
        )

    async def idle(self) -> bool:
        """Caught up, and every waiting entry tried at least once."""
        if any(q and q[0].attempts == 0 for q in self.queues.values()) or self.tasks:
            return False
        return await super().idle()
