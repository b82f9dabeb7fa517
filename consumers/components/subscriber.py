"""The subscriber: learns of a workflow's death in seconds from Cloudflare's Workflows event
subscription, read through its queue's HTTP pull consumer. Polling stays the safety net.

Each step pulls a batch (``AUDITREC_SUBSCRIPTION_BATCH`` messages, leased for
``AUDITREC_SUBSCRIPTION_VISIBILITY``) and finds the audit holding each message's instance (an
indexed look-up in the projection):

- ``errored``, ``terminated``, ``completed`` for a running audit → a ``ProbeRequested``
  (``trigger: subscription``, the message as ``data.notice``) on the confirmations topic: the
  confirmer (:mod:`.confirmer`) confirms the death with one request, in order of death, and the
  reconciler decides by its usual rules. A message alone never fails an audit: it carries no
  error to classify, and it may be late or wrong.
- ``queued``, ``started``, ``paused`` for a running audit → a ``WorkflowStatusObserved``
  (``source: subscription``, status ``queued``/``running``/``paused``, observed when the
  status changed), no request.
- an instance no audit holds yet is looked for again for :data:`MATCH_WITHIN` seconds (its
  ``AuditStarted`` may still be on its way to the projection), then counted ``unmatched``
  (if it stays alive, the orphan scan finds it in its workflow's listing); a workflow not
  watched (``AUDITREC_CLOUDFLARE_WORKFLOW``, ``AUDITREC_CLOUDFLARE_WORKFLOWS``) is counted
  ``ignored``; an audit's instance id reported in another workflow than the audit's is no news
  of that audit; an audit no longer running needs nothing.
- a message that cannot be read is dead-lettered with the reason (``auditrec dead-letters``
  shows it) and acknowledged: it is never pulled forever.

**Exactly once over an at-least-once queue.** A message is acknowledged only after what it
caused is durably in the log (:meth:`EventLog.append` returns once the broker has it). Event ids
derive from the message's content (workflow, instance, event, time), so a message delivered
again — after a crash between the append and the acknowledgement, an expired lease, a
duplicate, or another ``serve`` pulling the same queue — appends the same events, which every
consumer applies once. Acknowledgements go in one call per batch; one that fails is tried
again on the next steps until the lease would have expired (the message then comes back and is
absorbed).

Pulls and acknowledgements are no Workflows API calls: they never spend the probe budget, and
their failures (429, 5xx, timeouts) only slow the subscriber down (exponential back-off to
:data:`MAX_BACKOFF`, or the ``retry-after`` asked), never the watchdog. ``/readyz`` warns
while the last pull failed.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog
from pydantic import ValidationError

from consumers.eventlog.codec import dead_letter, describe, encode
from consumers.eventlog.port import EventLog, OutRecord, Record
from consumers.runtime.component import Component
from consumers.runtime.health import HealthBoard
from consumers.runtime.metrics import (
    DEAD_LETTERED,
    SUBSCRIPTION_BACKLOG,
    SUBSCRIPTION_LAST_PULL,
    SUBSCRIPTION_MESSAGES,
    SUBSCRIPTION_OLDEST_UNACKED,
    SUBSCRIPTION_PULLS,
)
from consumers.workflows.queues import Pulled, QueueClient, QueueFailure, QueueMessage
from consumers.workflows.subscription import ALIVE, ENDED, Report, Unreadable, read_report
from projections.row import AuditRow
from projections.store import ProjectionStore
from statemachine.events import (
    ProbeRequested,
    ProbeRequestedData,
    Trigger,
    WorkflowStatusObserved,
    WorkflowStatusObservedData,
    derived_id,
)

__all__ = ["MATCH_WITHIN", "MAX_BACKOFF", "PRODUCER", "Subscriber"]

PRODUCER = "auditrec-subscriber"
MATCH_WITHIN = 10.0  # seconds a message waits for the projection to know its instance
MAX_BACKOFF = 30.0  # seconds between pulls at most after failures
ACK_BATCH = 100  # leases acknowledged per call (a pull's most)
ACK_MARGIN = 5.0  # seconds before a lease ends after which acknowledging it is not tried
# (at most a quarter of the visibility timeout)
log = structlog.get_logger("auditrec.subscriber")


@dataclass(slots=True)
class _Held:
    """A pulled message whose instance no audit holds yet."""

    message: QueueMessage
    report: Report
    since: float  # monotonic: when it was first looked for
    lease_ends: float  # monotonic


@dataclass(frozen=True, slots=True)
class _Done:
    """A message nothing more is to be done for: to acknowledge."""

    lease: str
    event: str
    sent_ms: float
    lease_ends: float  # monotonic


@dataclass(slots=True)
class _Unacked:
    """A message whose effects are in the log and whose acknowledgement has not succeeded."""

    event: str
    sent_ms: float
    lease_ends: float  # monotonic


class Subscriber(Component):
    name = "subscriber"

    def __init__(
        self,
        event_log: EventLog,
        store: ProjectionStore,
        queue: QueueClient,
        *,
        workflow: str,
        workflows: Collection[str] = (),
        poll: float = 1.0,
        batch: int = 100,
        visibility: float = 60.0,
        health: HealthBoard | None = None,
        caught_up: Callable[[], Awaitable[bool]] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.log = event_log
        self.store = store
        self.queue = queue
        self.workflow = workflow  # the default one: an audit naming none runs in it
        self.watched = frozenset({workflow, *workflows})
        self.poll = poll
        self.batch = batch
        self.visibility = visibility
        self.ack_margin = min(ACK_MARGIN, visibility / 4)
        self.health = health
        # Whether the projection holds what the log holds: a message whose audit it does not
        # know is held while it lags (a rebuild, a slow projector), not counted unmatched.
        self.caught_up = caught_up
        self.clock = clock
        self.reader = event_log.topics.group(self.name)  # as dead letters name it
        self.source = f"cloudflare-queue/{queue.queue_id}"
        self._held: dict[str, _Held] = {}  # by lease id
        self._unacked: dict[str, _Unacked] = {}  # by lease id
        self._next_pull = 0.0
        self._delay = poll
        self._troubled = False  # the last batch's effects were not written
        self._next_ack = 0.0  # monotonic: acknowledgements that failed are tried again then
        self._ack_delay = 0.0
        self._ack_warned = False
        self.pulled = 0
        self.acked = 0

    async def start(self) -> None:
        await self.queue.start()

    async def stop(self) -> None:
        await self.queue.stop()

    async def step(self) -> int:
        await self._acknowledge([])  # what an earlier step could not acknowledge
        wait = self._next_pull - time.monotonic()
        if wait > 0:
            await asyncio.sleep(min(wait, self.poll_timeout))
            return 0
        if self._troubled:
            # The last batch's effects could not be written: pull nothing more (each pull
            # would use up a delivery attempt of what it leases) until the log and the store
            # answer again. A failure here fails the step; the supervisor backs off.
            await self.log.ping()
            await self.store.ping()
        answer = await self.queue.pull(self.batch, int(self.visibility * 1000))
        if isinstance(answer, QueueFailure):
            self._pull_failed(answer)
            return 0
        self._pulled(answer)
        self._troubled = True
        handled = await self.handle(answer.messages)
        self._troubled = False
        self._report_oldest()
        return handled

    # --- pulling -----------------------------------------------------------------------------

    def _pull_failed(self, failure: QueueFailure) -> None:
        SUBSCRIPTION_PULLS.labels(failure.reason).inc()
        self._delay = min(max(self._delay * 2, self.poll), MAX_BACKOFF)
        pause = self._delay if failure.retry_after is None else failure.retry_after
        self._next_pull = time.monotonic() + min(max(pause, self.poll), MAX_BACKOFF * 2)
        warning = (
            f"the last pull of queue {self.queue.queue_id} failed ({failure.reason}: "
            f"{failure.detail[:200]}); deaths are found by polling meanwhile"
        )
        if self.health is not None:
            self.health.warn(self.name, warning)
        log.warning("pull failed", reason=failure.reason, detail=failure.detail[:200])

    def _pulled(self, answer: Pulled) -> None:
        SUBSCRIPTION_PULLS.labels("messages" if answer.messages else "empty").inc()
        SUBSCRIPTION_LAST_PULL.set(time.time())
        if answer.backlog is not None:
            SUBSCRIPTION_BACKLOG.set(answer.backlog)
        if self.health is not None:
            self.health.warn(self.name, None)
        if len(answer.messages) >= self.batch:
            self._delay = 0.0  # more are waiting: pull again at once
        elif answer.messages or self._held:
            self._delay = self.poll
        else:  # quiet: a little slower, never so slow that a death waits long
            self._delay = min(max(self._delay * 1.5, self.poll), 2 * self.poll)
        self._next_pull = time.monotonic() + self._delay

    # --- handling ----------------------------------------------------------------------------

    async def handle(self, messages: Sequence[QueueMessage]) -> int:
        """Handle pulled ``messages`` (and those still waiting for their audit): append what
        they cause, then acknowledge every message that is done."""
        now = time.monotonic()
        lease_ends = now + self.visibility  # (pulled a moment ago)
        done: list[_Done] = []
        letters: list[OutRecord] = []
        seen = {h.report.key for h in self._held.values()}
        for message in messages:
            self.pulled += 1
            try:
                report = read_report(message)
            except Unreadable as exc:
                SUBSCRIPTION_MESSAGES.labels("unreadable", "pulled").inc()
                letters.append(self._dead_letter(message, str(exc)))
                done.append(_Done(message.lease_id, "unreadable", message.timestamp_ms, lease_ends))
                continue
            SUBSCRIPTION_MESSAGES.labels(report.event, "pulled").inc()
            if message.attempts > 1:
                SUBSCRIPTION_MESSAGES.labels(report.event, "redelivered").inc()
            if report.workflow not in self.watched or report.key in seen:
                # a workflow not watched; or the same report twice in hand (a duplicate)
                outcome = "ignored" if report.workflow not in self.watched else "duplicate"
                SUBSCRIPTION_MESSAGES.labels(report.event, outcome).inc()
                done.append(_Done(message.lease_id, report.event, message.timestamp_ms, lease_ends))
                continue
            seen.add(report.key)
            self._held[message.lease_id] = _Held(message, report, now, lease_ends)
        confirmations, observations = await self._match(now, done, letters)
        # Deaths are confirmed in the order they happened (the queue keeps no order).
        confirmations.sort(key=lambda pair: pair[0])
        records = [*letters, *(r for _, r in confirmations), *observations]
        if records:
            await self.log.append(records)  # durable before any message is acknowledged
        await self._acknowledge(done)
        return len(messages)

    async def _match(
        self, now: float, done: list[_Done], letters: list[OutRecord]
    ) -> tuple[list[tuple[datetime, OutRecord]], list[OutRecord]]:
        """What each held message causes, for those whose audit is known or whose wait is
        over; the others stay held."""
        if not self._held:
            return [], []
        rows = await self.store.audits.holding([h.report.instance_id for h in self._held.values()])
        confirmations: list[tuple[datetime, OutRecord]] = []
        observations: list[OutRecord] = []
        topics = self.log.topics
        for lease, held in list(self._held.items()):
            report = held.report
            row = rows.get(report.instance_id)
            if row is not None and (row.state.workflow or self.workflow) != report.workflow:
                row = None  # the same id in another workflow: not this audit's instance
            if row is None:
                waited = now - held.since
                if held.lease_ends - now > self.ack_margin and (
                    waited < MATCH_WITHIN or not await self._caught_up()
                ):
                    continue  # the projection may not know its audit yet
                SUBSCRIPTION_MESSAGES.labels(report.event, "unmatched").inc()
                log.info(
                    "no audit holds the instance",
                    workflow_instance_id=report.instance_id,
                    reported=report.event,
                )
            elif row.status != "running":
                pass  # settled already: nothing to confirm
            else:
                try:
                    if report.event in ENDED:
                        request = self._confirmation(row, report)
                        confirmations.append((report.at, encode(topics.confirmations, request)))
                    else:
                        observation = self._observation(row, report)
                        observations.append(encode(topics.lifecycle, observation))
                except ValidationError as exc:  # a value the events cannot hold
                    letters.append(self._dead_letter(held.message, describe(exc)))
            del self._held[lease]
            done.append(_Done(lease, report.event, held.message.timestamp_ms, held.lease_ends))
        return confirmations, observations

    def _confirmation(self, row: AuditRow, report: Report) -> ProbeRequested:
        return ProbeRequested(
            event_id=derived_id(
                f"{report.key}/{report.notice.message_id}", "subscription-confirmation"
            ),
            audit_id=row.audit_id,
            occurred_at=self.clock(),
            producer=PRODUCER,
            correlation_id=None,
            data=ProbeRequestedData(
                workflow_instance_id=report.instance_id,
                trigger=Trigger.SUBSCRIPTION,
                notice=report.notice,
                workflow=row.state.workflow,
            ),
        )

    @staticmethod
    def _observation(row: AuditRow, report: Report) -> WorkflowStatusObserved:
        """What the message says of a live instance; every field from the message, so a
        message delivered twice is the same event twice."""
        return WorkflowStatusObserved(
            event_id=derived_id(
                f"{report.key}/{report.notice.message_id}", "subscription-observation"
            ),
            audit_id=row.audit_id,
            occurred_at=report.at,
            producer=PRODUCER,
            causation_id=None,
            correlation_id=None,
            data=WorkflowStatusObservedData(
                workflow_instance_id=report.instance_id,
                status=ALIVE[report.event],
                workflow=row.state.workflow,
                trigger=Trigger.SUBSCRIPTION,
                observed_at=report.at,
                source="subscription",
                notice=report.notice,
            ),
        )

    def _dead_letter(self, message: QueueMessage, reason: str) -> OutRecord:
        """A dead letter for an unreadable message, its source position derived from the
        message id (one dead letter however often the message is delivered)."""
        digest = hashlib.blake2b(message.id.encode(), digest_size=7).digest()
        source = Record(
            topic=self.source,
            partition=0,
            offset=int.from_bytes(digest, "big"),
            key=message.id,
            value=message.body.encode(),
            timestamp_ms=int(message.timestamp_ms),
        )
        DEAD_LETTERED.labels(self.reader, "invalid").inc()
        SUBSCRIPTION_MESSAGES.labels("unreadable", "dead_lettered").inc()
        log.warning("unreadable message dead-lettered", message_id=message.id, reason=reason)
        return dead_letter(self.log.topics, source, self.reader, f"unreadable message: {reason}")

    # --- acknowledging -----------------------------------------------------------------------

    async def _acknowledge(self, done: list[_Done]) -> None:
        now = time.monotonic()
        for item in done:
            self._unacked[item.lease] = _Unacked(item.event, item.sent_ms, item.lease_ends)
        for lease, unacked in list(self._unacked.items()):
            if unacked.lease_ends - now <= self.ack_margin:  # it comes back, and is absorbed
                del self._unacked[lease]
        if not self._unacked or now < self._next_ack:
            return
        pending = list(self._unacked)
        for start in range(0, len(pending), ACK_BATCH):
            leases = pending[start : start + ACK_BATCH]
            answer = await self.queue.ack(leases)
            if isinstance(answer, QueueFailure):
                self._ack_failed(answer, len(leases))
                return
            for lease in leases:
                unacked = self._unacked.pop(lease)
                if lease not in answer.refused:
                    SUBSCRIPTION_MESSAGES.labels(unacked.event, "acked").inc()
            self.acked += answer.acked
            if answer.warnings:
                log.info("acknowledgement warnings", warnings=answer.warnings[:5])
        self._ack_delay = 0.0
        if self.health is not None and self._ack_warned:
            self._ack_warned = False
            self.health.warn(f"{self.name} acknowledgements", None)

    def _ack_failed(self, failure: QueueFailure, count: int) -> None:
        """Try again after a back-off (or the ``retry-after`` asked), and warn: messages not
        acknowledged come back and use up their delivery attempts."""
        self._ack_delay = min(max(self._ack_delay * 2, 1.0), MAX_BACKOFF)
        pause = self._ack_delay if failure.retry_after is None else failure.retry_after
        self._next_ack = time.monotonic() + min(pause, MAX_BACKOFF)
        log.warning(
            "acknowledgement failed: tried again",
            reason=failure.reason,
            detail=failure.detail[:200],
            messages=count,
        )
        if self.health is not None:
            self._ack_warned = True
            self.health.warn(
                f"{self.name} acknowledgements",
                f"acknowledging queue {self.queue.queue_id} failed ({failure.reason}: "
                f"{failure.detail[:200]}); unacknowledged messages come back (the token needs "
                "Queues write)",
            )

    async def _caught_up(self) -> bool:
        return True if self.caught_up is None else await self.caught_up()

    def _report_oldest(self) -> None:
        sent = [h.message.timestamp_ms for h in self._held.values()]
        sent += [u.sent_ms for u in self._unacked.values()]
        oldest = min((s for s in sent if s), default=None)
        SUBSCRIPTION_OLDEST_UNACKED.set(0 if oldest is None else time.time() - oldest / 1000)
