"""The reconciler: folds every audit's events into its state and judges each observation.

It is the only writer of reconciler decisions. A decision's id is derived from the
observation's id, and it is appended in the same atomic commit that moves the reconciler's
offsets (a Kafka transaction; a SQLite transaction), so a crash at any instant leaves each
decision in the log exactly once. A batch's commits run while the next batch is judged
(:mod:`consumers.components.reconciler.commits`); after a failed one the component restarts and
rebuilds its states, and they all end before partitions change hands or the consumer stops.

Its own decisions, read back, are passed over (recognised by their very bytes): each was folded
when it was made, and folding it again changes nothing. So is an event whose key
``(audit_id, event_id)`` was folded before, a duplicate or a conflict alike: the first content
wins, as in the projection (:mod:`consumers.components.keys`), for every audit that can
still change: a failed audit's keys are kept while it may be overturned or restored.

State is in memory, per assigned partition. On assignment the partition is folded from its
latest checkpoint (:mod:`consumers.components.checkpoints`; else from the beginning) up to the
committed offset; decisions of our own found beyond it (committed with
offsets, so already final) are applied early, exactly as the live path applies a decision the
moment it makes it — so a second observation of a dead audit never yields a second decision.
Terminal audits are kept as one shared object per (status, failed_by), so memory grows with
running audits only.

The mass-failure brake (:mod:`consumers.components.brake`): an ``instance_lost`` decision of a
large watchdog sweep, or any while the brake is engaged (read from the store, at most once a
second), is appended as ``AuditFailureHeld`` instead. The held event is kept per audit; an
``AuditFailureReleased`` for it makes the reconciler append the ``AuditFailed`` it held (the id
it would have had), in the same transaction as the release's offset.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence

import structlog

from consumers.components.base import LogConsumer
from consumers.components.checkpoints import Checkpoints
from consumers.components.keys import Keys, first_seen, settled
from consumers.components.reconciler.commits import Commits
from consumers.components.reconciler.counting import flush_counts
from consumers.components.reconciler.judgments import (
    judge_event,
    loudness,
    overturned,
    overturns,
    terminating,
)
from consumers.components.reconciler.log import (
    FOLDED_ONLY,
    MODELS_ONLY,
    Holds,
    fold_into,
    rebuild_partition,
)
from consumers.eventlog.codec import decode, encode
from consumers.eventlog.port import Consumer, EventLog, OutRecord, Record
from consumers.eventlog.wire import decode_view
from projections.checkpoints import CheckpointStore
from statemachine.errors import DecodeError
from statemachine.events import AuditEvent
from statemachine.machine import RUNNING
from statemachine.policy import Policy
from statemachine.state import AuditState

__all__ = ["Reconciler"]

log = structlog.get_logger("auditrec.reconciler")

BRAKE_READ_EVERY = 1.0  # seconds the brake's state is reused
# Decisions kept per partition to be passed over when read back (beyond this, while far
# behind, a decision read back is judged again: folding it again changes nothing).
MADE_KEPT = 100_000


class Reconciler(LogConsumer):
    name = "reconciler"
    transactional = True
    # Under load, a transaction per input partition every 20,000 records rather than 5,000
    # (+7 % events/s: bench/pipeline.py, reconciler). When quiet, batches stay small.
    max_records = 20000

    def __init__(
        self,
        event_log: EventLog,
        policy: Policy,
        *,
        brake_engaged: Callable[[], Awaitable[bool]] | None = None,
        checkpoints: CheckpointStore | None = None,
    ) -> None:
        super().__init__(event_log, [event_log.topics.lifecycle])
        self.policy = policy
        self.checkpoints = Checkpoints(checkpoints, self.group) if checkpoints else None
        self.partitions: dict[tuple[str, int], dict[str, AuditState]] = {}
        # Held decisions per partition, by audit (only while held).
        self.holds: dict[tuple[str, int], Holds] = {}
        # The decisions made here and not read back yet, per partition, as appended: read
        # back, they are passed over (see ``_handle``).
        self.made: dict[tuple[str, int], set[bytes]] = {}
        # The event ids folded into each audit that can still change, per partition.
        self.keys: dict[tuple[str, int], Keys] = {}
        self._brake_engaged = brake_engaged
        self._brake = (False, -BRAKE_READ_EVERY)  # last answer, when read
        # Next offset to process per partition (what this instance has committed).
        self.positions: dict[tuple[str, int], int] = {}
        self.decided = 0
        self.read_on_assign: dict[tuple[str, int], int] = {}  # records read to rebuild a partition
        self._loud = (False, False)  # whether log lines at DEBUG, INFO are emitted
        self._read_log_levels()
        self._commits = Commits(self.checkpoints)  # under way while the next batch is judged

    def _read_log_levels(self) -> None:
        """Ask which of the judge's log lines are emitted (once a batch: see ``judgments``)."""
        self._loud = loudness()

    @property
    def running(self) -> int:
        return sum(
            1 for states in self.partitions.values() for s in states.values() if s.status == RUNNING
        )

    def state(self, audit_id: str) -> AuditState | None:
        for states in self.partitions.values():
            if audit_id in states:
                return states[audit_id]
        return None

    async def on_assign(self, consumer: Consumer, partitions: Sequence[tuple[str, int]]) -> None:
        await self._settle()  # what this instance committed is read back as committed
        committed = await consumer.committed()
        for tp in list(self.partitions):  # states of partitions that went elsewhere
            if tp not in partitions:
                del self.partitions[tp]
                self.positions.pop(tp, None)
                self.holds.pop(tp, None)
                self.made.pop(tp, None)
                self.keys.pop(tp, None)
        held: dict[str, dict[int, int]] = {}  # the log's start offsets, read once per topic
        kept: list[int] = []
        restored_from = 0
        read = 0
        for tp in partitions:
            start = committed.get(tp, 0)
            mine = self.positions.get(tp)
            if tp in self.partitions and mine is not None and start <= mine:
                # Ours before the rebalance and nobody moved it since: the live state is
                # exact (the committed offset we read may even lag our last commit).
                self.seek(consumer, tp, mine)
                kept.append(tp[1])
                continue
            if tp[0] not in held:
                held[tp[0]] = await self.log.inspection.start_offsets(tp[0])
            restored = await rebuild_partition(
                self.log, self.checkpoints, tp, start, held[tp[0]].get(tp[1], 0)
            )
            states, holds, folded = restored.states, restored.holds, restored.read
            self.partitions[tp] = states
            self.holds[tp] = holds
            self.keys[tp] = restored.keys
            self.made.pop(tp, None)
            self.read_on_assign[tp] = folded
            self.positions[tp] = start
            self.seek(consumer, tp, start)
            restored_from += restored.checkpoint is not None
            read += folded
            log.debug(
                "partition assigned",
                partition=tp[1],
                committed=start,
                checkpoint=restored.checkpoint,
                records_read=folded,
                audits=len(states),
            )
        log.info(  # one line per assignment, whatever the number of partitions
            "partitions assigned",
            partitions=sorted(p for _, p in partitions),
            kept=kept,
            from_checkpoints=restored_from,
            records_read=read,
            audits=self.running,
        )

    async def stop(self) -> None:
        """Stop, forgetting all state: it may be ahead of what was committed (a failed
        commit), so the next assignment rebuilds it from the log."""
        async with self.batch_lock:
            await self._settle()
        await super().stop()
        if self.checkpoints is not None:
            await self.checkpoints.flush()
        self._forget()

    def _forget(self) -> None:
        self.partitions.clear()
        self.positions.clear()
        self.holds.clear()
        self.made.clear()
        self.keys.clear()

    async def on_revoke(self, consumer: Consumer, partitions: Sequence[tuple[str, int]]) -> None:
        # States are kept until the next assignment shows whether the partition stays here.
        await self._settle()
        log.info("partitions revoked", partitions=[p for _, p in partitions])

    # How an event no rule judges is folded (looked up once a batch; a test makes it fail).
    _fold: Callable[[dict[str, AuditState], Holds, AuditEvent, AuditState | None], AuditState]
    _fold = staticmethod(fold_into)

    async def brake_engaged(self) -> bool:
        """The brake's state as the store has it, read at most once per second."""
        if self._brake_engaged is None or not self.policy.brake_on:
            return False
        engaged, at = self._brake
        if time.monotonic() - at >= BRAKE_READ_EVERY:
            engaged = await self._brake_engaged()
            self._brake = (engaged, time.monotonic())
        return engaged

    def _judge(
        self,
        states: dict[str, AuditState],
        holds: Holds,
        event: AuditEvent,
        brake_engaged: bool = False,
    ) -> AuditEvent | None:
        """Fold ``event`` (of a type a rule judges: :meth:`_handle` folds the others) into its
        audit's state; the decision it calls for, folded too."""
        decision = judge_event(states, holds, event, self.policy, brake_engaged, self._loud)
        if decision is not None:
            self.decided += 1
        return decision

    async def _handle(self, records: list[Record]) -> int:
        outputs: dict[tuple[str, int], list[OutRecord]] = {}
        lifecycle = self.log.topics.lifecycle
        skipped = 0
        brake_engaged = await self.brake_engaged()
        self._read_log_levels()
        info = self._loud[1]
        positions = self.positions
        judge, fold = self._judge, self._fold
        tp: tuple[str, int] = ("", -1)
        out: list[OutRecord] = []
        states: dict[str, AuditState] | None = None
        holds: Holds = {}
        made: set[bytes] = set()
        keys: Keys = {}
        passed = 0
        position = 0
        for record in records:  # in runs of one partition: look its things up once a run
            if record.partition != tp[1] or record.topic != tp[0]:
                tp = (record.topic, record.partition)
                out = outputs.setdefault(tp, [])
                states = self.partitions.get(tp)
                if states is not None:
                    holds = self.holds.setdefault(tp, {})
                    made = self.made.setdefault(tp, set())
                    keys = self.keys.setdefault(tp, {})
                position = positions.get(tp, 0)
            offset = record.offset
            if states is None or offset < position:
                skipped += 1  # fetched before this partition's assignment settled
                continue
            position = positions[tp] = offset + 1
            value = record.value
            if made and value in made:  # a decision of ours read back: folded when made
                made.discard(value)
                continue
            try:  # decode_to_judge, inline
                event = decode_view(value)
                if event is None or event.type in MODELS_ONLY:
                    event = decode(value)
            except DecodeError as exc:
                self.dead_letter(record, str(exc), out)
                continue
            audit_id = event.audit_id
            if not first_seen(keys, event):  # its key was folded: a duplicate or a conflict
                passed += 1
                continue
            try:
                if event.type in FOLDED_ONLY:  # no rule judges these: fold (most events)
                    before = states.get(audit_id)
                    after = fold(states, holds, event, before)
                    if overturns(before, after):
                        overturned(event, info)
                    if after is None or after.status != RUNNING:  # most audits run on
                        settled(keys, audit_id, after)
                    continue
                decision = judge(states, holds, event, brake_engaged)
                if decision is not None:  # beside the events it was made from
                    made_record = encode(lifecycle, decision, tp[1])
                    out.append(made_record)
                    if decision.type == "WorkflowTerminationRequested":
                        out.append(encode(self.log.topics.probe_requests, terminating(decision)))
                    first_seen(keys, decision)
                    if len(made) < MADE_KEPT:
                        made.add(made_record.value)
                settled(keys, audit_id, states.get(audit_id))
            except Exception as exc:  # one event must not hold back its partition
                self.cannot_handle(record, exc, out)
        flush_counts()
        if passed:
            log.debug("events passed over: their key was folded before", count=passed)
        if skipped:
            log.info("records skipped: fetched before the assignment settled", count=skipped)
            records = [
                r for r in records if r.offset < self.positions.get((r.topic, r.partition), 0)
            ]
        assert self.consumer is not None
        self._commits.start(self.consumer, records, outputs, self.partitions, self.holds, self.keys)
        await self._commits.flush(keep=1)
        return len(records)

    async def _settle(self) -> None:
        """Wait for every commit under way (before partitions change hands or the consumer
        stops). After a failed one the states are ahead of the committed offsets: forget
        them, so the next assignment rebuilds them from the log."""
        if not await self._commits.settle():
            self._forget()

    def writing(self) -> bool:
        return bool(self._commits)

    async def written(self) -> None:
        await self._commits.flush()
