"""Telemetry: one PostHog ``site_audit:complete`` event for each audit failed by reconciliation.

It is a consumer group of its own on the lifecycle topic, so PostHog being down or slow can
delay telemetry but never the reconciler, the projector or the API.

**What is sent.** For every ``AuditFailed`` with ``failed_by = "reconciler"`` that actually
failed a running audit (a decision recorded on an audit already terminal changes nothing and
is not reported; shadow mode's ``AuditFailureSimulated`` is never reported), the capture of
:mod:`consumers.components.telemetry.posthog`.

**Where the facts come from.** The consumer folds each audit's events itself (the same pure
``evolve`` as everywhere, over events read as views: ``codec.read``), rebuilding its partitions
from the log on assignment exactly like the reconciler, instead of reading the projection at
send time: the projector may lag behind (or not run in this process), and the row may already
show later events (an overturn). Folding gives the state at the failure itself. An audit whose
failure an operator undoes (``AuditRestored``) is followed again only when that failure was an
operator's: one the reconciler made was reported already, and PostHog hears of an audit's
reconciliation failure once, whatever restores and failures follow. An event whose key
``(audit_id, event_id)`` was folded before is passed over, a duplicate or a conflict alike, as
the reconciler does (:mod:`consumers.components.keys`). Only running audits are followed in
memory; a failed audit that may still change is kept compact (its status and who failed it)
with its keys, so a conflict arriving after its failure is passed over. They are checkpointed
(:mod:`consumers.components.checkpoints`) whenever a partition's offsets catch up with what was
consumed (nothing waits in the outbox), so an assignment folds only what follows the latest
checkpoint.

**Exactly once, as far as PostHog can tell.** The SDK runs in ``sync_mode`` in a worker thread
(bounded by its HTTP timeout): ``capture`` returns the event's uuid only once PostHog answered
200, and ``None`` when the request failed. Only then is the event id recorded in
``telemetry_sent`` (the projection store), and events already recorded are skipped, so a
restart does not resend. A crash between PostHog's answer and the record resends the *same*
uuid and timestamp, which PostHog deduplicates.

**Retries without blocking.** Undelivered events wait in a bounded outbox
(:mod:`consumers.components.telemetry.outbox`: backoff, giving up, the ``auditrec_telemetry``
counter) while newer records keep being consumed. The group's offsets are committed only up to
the oldest event still waiting, so a restart retries it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

import structlog

from consumers.components.folding import Folding
from consumers.components.keys import Keys, first_seen, kept, settled
from consumers.components.telemetry.outbox import Outbox, Pending
from consumers.components.telemetry.posthog import EVENT_NAME, build_client, capture_arguments
from consumers.eventlog.codec import read
from consumers.eventlog.port import EventLog, OutRecord, Record, TopicPartition
from consumers.runtime.settings import Settings
from projections.store import ProjectionStore
from statemachine.errors import ConfigError, DecodeError
from statemachine.events import AuditEvent, FailedBy
from statemachine.machine import FAILED, RUNNING, TERMINAL
from statemachine.state import AuditState, evolve, initial

__all__ = ["Telemetry"]

log = structlog.get_logger("auditrec.telemetry")

_COMPACT: dict[tuple[str, str | None], AuditState] = {}


def _compact(state: AuditState) -> AuditState:
    """An audit not followed, kept for its keys: its status and who failed it, one shared
    state for each (no audit id: how a checkpoint tells it from a followed one)."""
    at = (state.status, state.failed_by)
    shared = _COMPACT.get(at)
    if shared is None:
        shared = _COMPACT[at] = AuditState(audit_id="", status=at[0], failed_by=at[1])
    return shared


class Telemetry(Folding):
    name = "telemetry"

    def __init__(
        self,
        event_log: EventLog,
        store: ProjectionStore,
        settings: Settings,
        *,
        client: Any = None,
        send_timeout: float = 5.0,
        retry_base: float = 1.0,
        retry_cap: float = 60.0,
        max_attempts: int = 60,
        max_pending: int = 1000,
    ) -> None:
        super().__init__(event_log, store)
        if client is None and settings.posthog_api_key is None:
            raise ConfigError("AUDITREC_POSTHOG_API_KEY is not set: telemetry is off")
        self.settings = settings
        self.client = client
        self._own_client = client is None
        self.send_timeout = send_timeout
        self.max_pending = max_pending
        self.outbox = Outbox(
            store.telemetry,
            self._send,
            retry_base=retry_base,
            retry_cap=retry_cap,
            max_attempts=max_attempts,
        )

    @property
    def pending(self) -> list[Pending]:
        """The captures waiting for PostHog, oldest first."""
        return self.outbox.items

    @property
    def sent(self) -> int:
        return self.outbox.sent

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        if self.client is None:
            self.client = build_client(self.settings, timeout=self.send_timeout)
        await super().start()

    async def stop(self) -> None:
        await super().stop()
        self.outbox.items.clear()
        client = self.client
        if self._own_client and client is not None:
            self.client = None
            try:  # waits for a send in flight at most one HTTP timeout
                await asyncio.wait_for(asyncio.to_thread(client.shutdown), self.send_timeout + 1)
            except Exception as exc:
                log.warning("PostHog client shutdown failed", error=str(exc))

    def waiting(self) -> Iterable[tuple[TopicPartition, int]]:
        return ((p.tp, p.offset) for p in self.outbox.items)

    def forget(self, partitions: set[TopicPartition]) -> None:
        self.outbox.items[:] = [p for p in self.outbox.items if p.tp not in partitions]

    # -- folding ------------------------------------------------------------------------------

    @staticmethod
    def fold(
        states: dict[str, AuditState], keys: Keys, event: AuditEvent
    ) -> tuple[AuditState, AuditState] | None:
        """The audit's state before and after ``event`` as followed (an audit not followed:
        from its initial state); ``None`` when its key was folded before (passed over)."""
        if not first_seen(keys, event):
            return None
        audit_id = event.audit_id
        before = states.get(audit_id)
        unfollowed = None
        if before is not None and before.audit_id == "":  # kept for its keys only
            unfollowed, before = before._replace(audit_id=audit_id), None
        if before is None:
            before = initial(audit_id)
        if (
            event.type == "AuditRestored"
            and not before.exists
            and event.data.failed_by is FailedBy.OPERATOR
        ):  # never reported: followed again, with the facts the restore carries
            before = AuditState(audit_id=event.audit_id, status="failed", failed_by="operator")
        after = evolve(before, event)
        where = after  # where the audit is, followed or not
        if unfollowed is not None and not after.exists:
            where = evolve(unfollowed, event)
        if after.exists and after.status not in TERMINAL:
            states[audit_id] = after
        elif kept(where):  # not followed (reported once), but it may still change
            states[audit_id] = _compact(where)
        else:
            states.pop(audit_id, None)
        settled(keys, audit_id, where)
        return before, after

    # -- the loop -----------------------------------------------------------------------------

    async def step(self) -> int:
        records = await self.poll() if len(self.pending) < self.max_pending else []
        # Under the batch lock like every consumer: a revocation waits for the step, so the
        # pending set never changes hands while it is folded, sent or committed.
        async with self.batch_lock:
            mine = self.still_assigned(records) if records else []
            if mine and self._seeks != self.polled_at:
                mine = self.not_sought_since(mine, self.polled_at)
            handled, delivered = await self._step(mine)
            self.progressed(mine)
        if not handled and not delivered and self.pending:
            # Waiting for a retry with nothing new to read: do not spin.
            wait = self.outbox.blocked_until - time.monotonic()
            await asyncio.sleep(min(max(wait, 0.05), self.poll_timeout))
        return handled + delivered

    async def _step(self, records: list[Record]) -> tuple[int, int]:
        dlq: list[OutRecord] = []
        for record in records:
            tp = (record.topic, record.partition)
            self._consumed[tp] = record.offset + 1
            try:
                event = read(record.value)  # a view: events are only read here
            except DecodeError as exc:
                self.dead_letter(record, str(exc), dlq)
                continue
            try:
                self._take(tp, record.offset, event)
            except Exception as exc:  # one event must not hold back its partition
                self.cannot_handle(record, exc, dlq)
        delivered = await self.outbox.deliver()
        await self.commit_waiting(dlq)
        return len(records), delivered

    def _take(self, tp: TopicPartition, offset: int, event: AuditEvent) -> None:
        """Fold ``event``; queue the capture of a failure the reconciler decided."""
        folded = self.folded(tp, event)
        if folded is None:
            return
        before, after = folded
        if (
            event.type == "AuditFailed"
            and event.data.failed_by is FailedBy.RECONCILER
            and before.status == RUNNING
            and after.status == FAILED
        ):
            capture = capture_arguments(before, event)
            self.outbox.items.append(
                Pending(tp, offset, str(event.event_id), event.audit_id, capture)
            )

    async def _send(self, item: Pending) -> bool:
        client = self.client
        if client is None:
            return False
        try:
            result = await asyncio.wait_for(
                asyncio.to_thread(client.capture, EVENT_NAME, **item.capture),
                self.send_timeout + 2,
            )
        except Exception as exc:  # never let PostHog stop the loop
            log.warning("telemetry send raised", event_id=item.event_id, error=str(exc))
            return False
        return result is not None and str(result) == item.event_id

    async def idle(self) -> bool:
        """Caught up, and every waiting event has been tried at least once (the rest wait for
        their retry; their offsets are not committed, so nothing is lost by stopping)."""
        if any(p.attempts == 0 for p in self.pending):
            return False
        return await super().idle()
