"""The reconciler: folds every audit's events into its state and judges each observation.

It is the only writer of reconciler decisions. A decision's id is derived from the
observation's id, and it is appended in the same atomic commit that moves the reconciler's
offsets (a Kafka transaction; a SQLite transaction), so a crash at any instant leaves each
decision in the log exactly once.

State is in memory, per assigned partition. On assignment the partition is folded from the
beginning up to the committed offset; decisions of our own found beyond it (committed with
offsets, so already final) are applied early, exactly as the live path applies a decision the
moment it makes it — so a second observation of a dead audit never yields a second decision.
Terminal audits are kept as one shared object per (status, failed_by), so memory grows with
running audits only.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from consumers.components.base import LogConsumer
from consumers.eventlog.codec import decode, encode
from consumers.eventlog.port import Consumer, EventLog, OutRecord, Record
from consumers.runtime.metrics import DECISIONS, OVERTURNED
from statemachine.errors import DecodeError
from statemachine.events import AuditEvent, AuditFailed, FailedBy
from statemachine.machine import TERMINAL
from statemachine.policy import Policy
from statemachine.rules import decide
from statemachine.state import AuditState, evolve

__all__ = ["Reconciler"]

log = structlog.get_logger("auditrec.reconciler")

_TERMINAL: dict[tuple[str, str | None], AuditState] = {}


def _compact(state: AuditState) -> AuditState:
    """Terminal audits only need their status (and who failed them, for overturns)."""
    if state.status not in TERMINAL:
        return state
    key = (state.status, state.failed_by)
    shared = _TERMINAL.get(key)
    if shared is None:
        shared = _TERMINAL[key] = AuditState(audit_id="", status=key[0], failed_by=key[1])
    return shared


def _own_decision(event: AuditEvent) -> bool:
    return isinstance(event, AuditFailed) and event.data.failed_by is FailedBy.RECONCILER


def _may_be_decision(record: Record) -> bool:
    """Cheap pre-check on the ``event-type`` header (absent header: decode to be sure)."""
    for key, value in record.headers:
        if key == "event-type":
            return value == b"AuditFailed"
    return True


class Reconciler(LogConsumer):
    name = "reconciler"
    transactional = True

    def __init__(self, event_log: EventLog, policy: Policy) -> None:
        super().__init__(event_log, [event_log.topics.lifecycle])
        self.policy = policy
        self.partitions: dict[tuple[str, int], dict[str, AuditState]] = {}
        # Next offset to process per partition (what this instance has committed).
        self.positions: dict[tuple[str, int], int] = {}
        self.decided = 0

    @property
    def running(self) -> int:
        return sum(
            1
            for states in self.partitions.values()
            for s in states.values()
            if s.status == "running"
        )

    def state(self, audit_id: str) -> AuditState | None:
        for states in self.partitions.values():
            if audit_id in states:
                return states[audit_id]
        return None

    async def on_assign(self, consumer: Consumer, partitions: Sequence[tuple[str, int]]) -> None:
        committed = await consumer.committed()
        for tp in list(self.partitions):  # states of partitions that went elsewhere
            if tp not in partitions:
                del self.partitions[tp]
                self.positions.pop(tp, None)
        for tp in partitions:
            start = committed.get(tp, 0)
            mine = self.positions.get(tp)
            if tp in self.partitions and mine is not None and start <= mine:
                # Ours before the rebalance and nobody moved it since: the live state is
                # exact (the committed offset we read may even lag our last commit).
                consumer.seek(tp, mine)
                log.info("partition kept", partition=tp[1], position=mine)
                continue
            states: dict[str, AuditState] = {}
            async for batch in self.log.read(tp[0], tp[1], 0, None):
                for record in batch:
                    if record.offset >= start and not _may_be_decision(record):
                        continue
                    try:
                        event = decode(record.value)
                    except DecodeError:
                        continue
                    if record.offset < start or _own_decision(event):
                        self._fold(states, event)
            self.partitions[tp] = states
            self.positions[tp] = start
            consumer.seek(tp, start)
            log.info("partition assigned", partition=tp[1], committed=start, audits=len(states))

    async def stop(self) -> None:
        """Stop, forgetting all state: it may be ahead of what was committed (a failed
        commit), so the next assignment rebuilds it from the log."""
        await super().stop()
        self.partitions.clear()
        self.positions.clear()

    async def on_revoke(self, consumer: Consumer, partitions: Sequence[tuple[str, int]]) -> None:
        # States are kept until the next assignment shows whether the partition stays here.
        log.info("partitions revoked", partitions=[p for _, p in partitions])

    @staticmethod
    def _fold(states: dict[str, AuditState], event: AuditEvent) -> AuditState:
        current = states.get(event.audit_id) or AuditState(audit_id=event.audit_id)
        if current.audit_id == "":  # a compacted terminal audit
            current = AuditState(
                audit_id=event.audit_id, status=current.status, failed_by=current.failed_by
            )
        new = evolve(current, event)
        if new.exists:
            states[event.audit_id] = _compact(new)
        return new

    def _judge(self, states: dict[str, AuditState], event: AuditEvent) -> AuditEvent | None:
        """Fold ``event`` into its audit's state; the decision it calls for, folded too."""
        before = states.get(event.audit_id)
        verdict, decision = decide(before, event, self.policy)
        after = self._fold(states, event)
        if verdict is not None and event.type == "WorkflowStatusObserved":
            code = decision.data.error_code if decision is not None else ""  # type: ignore[union-attr]
            DECISIONS.labels(verdict.rule, code).inc()
        if (
            before is not None
            and before.status == "failed"
            and before.failed_by == "reconciler"
            and after.status == "completed"
        ):
            OVERTURNED.inc()
            log.info("failure overturned", audit_id=event.audit_id, rule="overturn")
        if decision is None:
            return None
        self._fold(states, decision)
        self.decided += 1
        log.info(
            "audit failed" if not self.policy.shadow else "audit would fail (shadow)",
            audit_id=event.audit_id,
            rule=verdict.rule if verdict else None,
            error_code=decision.data.error_code,  # type: ignore[union-attr]
            reason=verdict.reason if verdict else None,
            decision_id=str(decision.event_id),
        )
        return decision

    async def _handle(self, records: list[Record]) -> int:
        outputs: dict[tuple[str, int], list[OutRecord]] = {}
        lifecycle = self.log.topics.lifecycle
        skipped = 0
        for record in records:
            tp = (record.topic, record.partition)
            if tp not in self.partitions or record.offset < self.positions.get(tp, 0):
                skipped += 1  # fetched before this partition's assignment settled
                continue
            self.positions[tp] = record.offset + 1
            out = outputs.setdefault(tp, [])
            event = self.decode(record, out)
            if event is None:
                continue
            states = self.partitions.setdefault(tp, {})
            try:
                decision = self._judge(states, event)
                if decision is not None:
                    out.append(encode(lifecycle, decision))
            except Exception as exc:  # one event must not hold back its partition
                self.cannot_handle(record, exc, out)
        if skipped:
            log.info("records skipped: fetched before the assignment settled", count=skipped)
            records = [
                r for r in records if r.offset < self.positions.get((r.topic, r.partition), 0)
            ]
        await self.commit(records, outputs)
        return len(records)
