"""The confirmer: the probe of the event subscription's requests (the confirmations topic).

A death the queue reported is confirmed with one request before the reconciler decides
anything. These requests have a topic and a component of their own so that a burst of deaths
(5,000 after a bad deploy is 25 minutes of requests at 1,000 per 5 minutes) waits here, in the
order the instances died, without holding back the watchdog's or the status reads' probes:

- a request is never dropped for its age, and waits for the budget as long as it takes
  (:data:`PATIENCE`), spending what the watchdog's floor and the status reads' share leave
  (spender ``subscription``); its own Workflows client, so its waiting calls take none of the
  probe's connections;
- a request whose audit is no longer running, or whose instance it no longer holds, is
  skipped without a call (the watchdog or a status read settled it meanwhile), as is a
  request answered here already (the subscriber appended it twice);
- an answer's id derives from its request's position in the topic, so a request appended
  twice and answered twice (after a restart) gives two observations, never two contents
  under one id; the second finds the audit settled and changes nothing.

The backlog (records not answered yet) is the ``auditrec_subscription_confirmations_waiting``
gauge; :func:`awaiting_confirmation` names its audits, so the watchdog does not probe them too.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from uuid import UUID

import structlog

from consumers.components.probe import Probe, Request
from consumers.eventlog.codec import decode_probe
from consumers.eventlog.port import EventLog, Record
from consumers.runtime.metrics import CONFIRMATIONS_WAITING
from consumers.workflows.client import InstanceStatus, ProbeFailure, WorkflowsClient
from projections.store import ProjectionStore
from statemachine.errors import DecodeError
from statemachine.events import ProbeFailureReason, ProbeRequested, Trigger

__all__ = ["PATIENCE", "Confirmer", "awaiting_confirmation", "confirmations_waiting"]

SUBSCRIPTION = Trigger.SUBSCRIPTION.value  # the confirmer's spender of the budget
PATIENCE = 10.0  # seconds a batch's calls wait for a budget slot (under a group's lease)
BATCH = 20  # confirmations handled at most at a time
REMEMBERED = 50_000  # request ids answered here, to skip one appended twice
SCAN_LIMIT = 50_000  # records of the backlog read to name its audits
log = structlog.get_logger("auditrec.confirmer")


class Confirmer(Probe):
    name = "confirmer"
    max_records = BATCH

    def __init__(
        self,
        event_log: EventLog,
        client: WorkflowsClient,
        store: ProjectionStore,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        super().__init__(event_log, client, max_age=timedelta.max, clock=clock)
        self.topic_names = [event_log.topics.confirmations]
        self.store = store
        self.skipped = 0
        self._answered: OrderedDict[UUID, None] = OrderedDict()  # committed answers' requests
        self._answering: list[UUID] = []

    def expired(self, request: ProbeRequested, now: datetime) -> bool:
        return False

    def bound(self, group: list[Request], now: datetime) -> float | None:
        return PATIENCE

    def unanswered(self, result: InstanceStatus | ProbeFailure) -> bool:
        """A confirmation the budget refused (nothing sent), or a 429 answered, is asked again:
        the death stays to be confirmed, in its turn. Other failures are recorded (the
        watchdog asks again later), so that one instance that keeps failing never holds
        back the deaths behind it."""
        return isinstance(result, ProbeFailure) and result.reason is ProbeFailureReason.RATE_LIMITED

    def cause(self, request: ProbeRequested, record: Record) -> UUID | str:
        return f"{request.event_id}@{record.topic}/{record.partition}/{record.offset}"

    async def wanted(self, requests: list[Request]) -> list[Request]:
        instances = [r.data.workflow_instance_id for _, r in requests]
        rows = await self.store.audits.holding([i for i in instances if i])
        kept: list[Request] = []
        seen: set[UUID] = set()
        for tp, request in requests:
            instance = request.data.workflow_instance_id
            row = rows.get(instance or "")
            if (
                request.event_id in self._answered
                or request.event_id in seen
                or row is None
                or row.audit_id != request.audit_id
                or row.status != "running"
            ):
                self.skipped += 1
                log.debug("confirmation not needed", audit_id=request.audit_id)
                continue
            seen.add(request.event_id)
            kept.append((tp, request))
        self._answering = [r.event_id for _, r in kept]
        return kept

    async def _handle(self, records: list[Record]) -> int:
        self._answering = []
        handled = await super()._handle(records)
        for event_id in self._answering:  # committed: answered
            self._answered[event_id] = None
        while len(self._answered) > REMEMBERED:
            self._answered.popitem(last=False)
        return handled

    async def step(self) -> int:
        """Poll only as many confirmations as the budget has room for now, so that a batch's
        calls rarely wait (a long wait would outlast the group's lease)."""
        room = await self.client.room(SUBSCRIPTION)
        if room is not None and room <= 0:
            await asyncio.sleep(self.poll_timeout)
            handled = 0
        else:
            self.max_records = BATCH if room is None else min(BATCH, room)
            handled = await super().step()
        if self.consumer is not None:
            CONFIRMATIONS_WAITING.set(await self.consumer.lag())
        return handled

    async def stop(self) -> None:
        await super().stop()
        await self.client.stop()


async def awaiting_confirmation(event_log: EventLog, limit: int = SCAN_LIMIT) -> set[str]:
    """The audits with a confirmation not answered yet: the confirmer's backlog (what its group
    has not committed), read outside the group; at most ``limit`` records."""
    topic = event_log.topics.confirmations
    group = event_log.topics.group(Confirmer.name)
    ends = await event_log.inspection.end_offsets(topic)
    committed = await event_log.inspection.group_offsets(group, topic)
    starts = await event_log.inspection.start_offsets(topic)
    audits: set[str] = set()
    left = limit
    for partition, end in ends.items():
        start = max(committed.get(partition, 0), starts.get(partition, 0))
        if start >= end or left <= 0:
            continue
        async for batch in event_log.inspection.read(topic, partition, start, end):
            for record in batch:
                try:
                    audits.add(decode_probe(record.value).audit_id)
                except DecodeError:
                    continue
            left -= len(batch)
            if left <= 0:
                break
    return audits


async def confirmations_waiting(event_log: EventLog) -> int:
    """How many confirmations the confirmer has not answered yet (its backlog), read outside
    its group."""
    topic = event_log.topics.confirmations
    group = event_log.topics.group(Confirmer.name)
    ends = await event_log.inspection.end_offsets(topic)
    committed = await event_log.inspection.group_offsets(group, topic)
    starts = await event_log.inspection.start_offsets(topic)
    return sum(max(end - max(committed.get(p, 0), starts.get(p, 0)), 0) for p, end in ends.items())
