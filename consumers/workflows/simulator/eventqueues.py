"""Cloudflare Queues in the Workflows simulator: queues fed by a Workflows event subscription
and read by an HTTP pull consumer, with faults per queue; thread-safe behind one lock.

A status change of an instance publishes one message to every queue subscribed to its workflow
and event type (:meth:`Queues.status_changed`). A pull leases visible messages, oldest first,
for its visibility timeout; an ack removes a leased message, a retry makes it visible again
after its delay, and a lease that lapses makes it visible again. A message delivered
``max_retries + 1`` times whose lease lapses or is retried goes to the queue's dead letters.
:mod:`.server` documents the HTTP side; the bodies are in :mod:`.bodies`.
"""

from __future__ import annotations

import itertools
import json
import random
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from consumers.workflows.simulator.bodies import (
    EVENT_TYPES,
    VERSION_ID,
    QueueBody,
    QueueFaultsBody,
    iso,
)

__all__ = ["SOURCE", "Message", "PullRefused", "QueueNotFound", "Queues"]

SOURCE = "workflows.workflow"  # the event source type, also the messages' CF-sourceMessageSource
_RETENTION_S = 345_600  # four days, Cloudflare's default message retention


class QueueNotFound(KeyError):
    """No queue has this id."""


@dataclass(frozen=True, slots=True)
class PullRefused:
    """A pull answered with an injected error (the ``pull_error`` fault)."""

    http_status: int
    retry_after: float | None


@dataclass(slots=True)
class Message:
    id: str
    body: str
    content_type: str
    timestamp_ms: int  # wall clock, when it was published
    visible_at: float  # monotonic seconds
    attempts: int = 0
    lease_id: str | None = None
    lease_until: float = 0.0
    source: str | None = SOURCE  # the event subscription's; none for a producer's message

    def delivery(self) -> dict[str, Any]:
        """The message as a pull returns it."""
        return {
            "id": self.id, "body": self.body, "attempts": self.attempts,
            "lease_id": self.lease_id, "timestamp_ms": self.timestamp_ms,
            "metadata": {"CF-Content-Type": self.content_type}
            | ({"CF-sourceMessageSource": self.source} if self.source else {}),
        }  # fmt: skip

    def debug(self, now: float) -> dict[str, Any]:
        state = "leased" if self.lease_id else "visible" if self.visible_at <= now else "delayed"
        return {"id": self.id, "body": self.body, "attempts": self.attempts, "state": state,
                "timestamp_ms": self.timestamp_ms}  # fmt: skip


@dataclass
class _Queue:
    id: str
    config: QueueBody
    rng: random.Random
    created: datetime
    subscription_id: str = field(default_factory=lambda: secrets.token_hex(16))
    consumer_id: str = field(default_factory=lambda: secrets.token_hex(16))
    messages: dict[str, Message] = field(default_factory=dict)  # by id, in publishing order
    leases: dict[str, str] = field(default_factory=dict)  # current lease id → message id
    dead: list[Message] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    pull_errors_left: int | None = None
    backlog_bytes: int = 0  # of the messages' bodies, kept as they come and go

    @property
    def faults(self) -> QueueFaultsBody:
        return self.config.faults

    def subscribed(self, workflow: str, event: str) -> bool:
        c = self.config
        return (c.workflows is None or workflow in c.workflows) and (
            c.events is None or event in c.events
        )


class Queues:
    """Every queue of the simulated account by id. ``clock`` is monotonic seconds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._queues: dict[str, _Queue] = {}

    # --- the control side ------------------------------------------------------------------

    def put(self, queue_id: str, config: QueueBody) -> dict[str, Any]:
        """Create or replace a queue and its subscription (an empty queue); its stats."""
        if not queue_id:
            raise ValueError("queue_id must be non-empty")
        with self._lock:
            q = _Queue(queue_id, config, random.Random(config.faults.seed), datetime.now(UTC))
            q.pull_errors_left = _times(config.faults)
            self._queues[queue_id] = q
            return self._stats(q)

    def set_faults(self, queue_id: str, faults: QueueFaultsBody) -> None:
        with self._lock:
            q = self._get(queue_id)
            q.config = q.config.model_copy(update={"faults": faults})
            q.rng = random.Random(faults.seed)
            q.pull_errors_left = _times(faults)

    def delete(self, queue_id: str) -> bool:
        with self._lock:
            return self._queues.pop(queue_id, None) is not None

    def clear(self) -> None:
        with self._lock:
            self._queues.clear()

    def stats(self, queue_id: str) -> dict[str, Any]:
        with self._lock:
            return self._stats(self._get(queue_id))

    def describe(self, queue_id: str) -> dict[str, Any]:
        """The queue as ``GET …/queues/{id}`` answers it, with its consumer: an HTTP pull
        consumer, or a Worker when its config says ``consumer: "worker"``."""
        with self._lock:
            q = self._get(queue_id)
            created = q.created.isoformat(timespec="microseconds").replace("+00:00", "Z")
            consumer: dict[str, Any] = {
                "type": "http_pull", "consumer_id": q.consumer_id, "queue_name": q.id,
                "created_on": created, "dead_letter_queue": "",
                "settings": {"batch_size": 10, "max_retries": q.config.max_retries,
                             "retry_delay": 0, "visibility_timeout_ms": 30_000},
            }  # fmt: skip
            if q.config.consumer == "worker":  # a Worker consumes it: no pull consumer
                consumer |= {"type": "worker", "script_name": f"{q.id}-consumer"}
                consumer["settings"] = {"batch_size": 10, "max_retries": q.config.max_retries,
                                        "max_wait_time_ms": 5000, "retry_delay": 0}  # fmt: skip
            return {
                "queue_id": q.id, "queue_name": q.id, "created_on": created,
                "modified_on": created, "consumers": [consumer], "consumers_total_count": 1,
                "producers": [], "producers_total_count": 0,
                "settings": {"delivery_delay": 0, "delivery_paused": False,
                             "message_retention_period": _RETENTION_S},
            }  # fmt: skip

    # --- publishing --------------------------------------------------------------------------

    def status_changed(self, workflow: str, instance_id: str, status: str, when: datetime) -> None:
        """Publish the event of an instance's new status to every subscribed queue (a status
        without an event publishes nothing)."""
        event = EVENT_TYPES.get(status)
        if event is None:
            return
        with self._lock:
            for q in self._queues.values():
                if not q.subscribed(workflow, event):
                    continue
                if q.rng.random() < q.faults.drop:
                    q.counts["dropped"] += 1
                    continue
                body = json.dumps({
                    "type": event,
                    "source": {"type": SOURCE, "workflowName": workflow},
                    "payload": {"versionId": VERSION_ID, "instanceId": instance_id},
                    "metadata": {"accountId": q.config.account_id,
                                 "eventSubscriptionId": q.subscription_id,
                                 "eventSchemaVersion": 1, "eventTimestamp": iso(when)},
                })  # fmt: skip
                self._enqueue(q, body, "json")
                if q.rng.random() < q.faults.duplicate:
                    q.counts["duplicated"] += 1
                    self._enqueue(q, body, "json")

    def inject(self, queue_id: str, body: str, content_type: str) -> str:
        """Enqueue an arbitrary message; its id."""
        with self._lock:
            return self._enqueue(self._get(queue_id), body, content_type).id

    # --- the producer API (what a Worker's `env.QUEUE.send`, or the REST API, sends) --------

    def send(self, queue_id: str, messages: Sequence[tuple[str, str, float]]) -> dict[str, Any]:
        """Enqueue ``(body, content_type, delay seconds)`` messages in order, all or none (an
        unknown queue takes none); the answer's metrics, as Cloudflare gives them."""
        with self._lock:
            q = self._get(queue_id)
            for body, content_type, delay in messages:
                m = self._enqueue(q, body, content_type)
                m.visible_at += delay
                m.source = None
                q.counts["sent"] += 1
            return {"metadata": {"metrics": self._metrics(q)}}

    # --- the HTTP pull consumer --------------------------------------------------------------

    def pull(
        self, queue_id: str, batch_size: int, visibility_timeout_ms: int
    ) -> dict[str, Any] | PullRefused:
        """Lease up to ``batch_size`` visible messages; the API's ``result``."""
        with self._lock:
            q = self._get(queue_id)
            q.counts["pulls"] += 1
            if (refused := self._pull_error(q)) is not None:
                return refused
            now = self._clock()
            self._settle(q, now)
            visible = (m for m in q.messages.values() if m.lease_id is None and m.visible_at <= now)
            if q.faults.reorder:
                candidates = list(visible)
                batch = q.rng.sample(candidates, min(batch_size, len(candidates)))
            else:
                batch = list(itertools.islice(visible, batch_size))  # stops at a full batch
            for m in batch:
                m.attempts += 1
                m.lease_id = secrets.token_urlsafe(32)
                m.lease_until = now + visibility_timeout_ms / 1000
                q.leases[m.lease_id] = m.id
            return {"messages": [m.delivery() for m in batch],
                    "message_backlog_count": len(q.messages),
                    "metadata": {"metrics": self._metrics(q)}}  # fmt: skip

    def ack(
        self, queue_id: str, acks: Iterable[str], retries: Iterable[tuple[str, float]]
    ) -> dict[str, Any]:
        """Acknowledge and retry leased messages; the API's ``result``. A lease that is not
        current (unknown, lapsed, or already used) is skipped and named in ``warnings``."""
        with self._lock:
            q = self._get(queue_id)
            now = self._clock()
            self._settle(q, now)
            q.counts["acks"] += 1
            warnings: dict[str, str] = {}
            acked = retried = 0
            for lease_id in acks:
                if (m := self._take_lease(q, lease_id, warnings)) is not None:
                    self._remove(q, m)
                    q.counts["acked"] += 1
                    acked += 1
            for lease_id, delay in retries:
                if (m := self._take_lease(q, lease_id, warnings)) is not None:
                    q.counts["retried"] += 1
                    retried += 1
                    self._release(q, m, now + delay)
            return {"ackCount": acked, "retryCount": retried, "warnings": warnings}

    # --- inside the lock -------------------------------------------------------------------

    def _get(self, queue_id: str) -> _Queue:
        q = self._queues.get(queue_id)
        if q is None:
            raise QueueNotFound(queue_id)
        return q

    def _enqueue(self, q: _Queue, body: str, content_type: str) -> Message:
        visible_at = self._clock() + q.faults.delay_ms / 1000
        m = Message(secrets.token_hex(16), body, content_type, int(time.time() * 1000), visible_at)
        q.messages[m.id] = m
        q.backlog_bytes += len(body.encode())
        q.counts["published"] += 1
        return m

    @staticmethod
    def _metrics(q: _Queue) -> dict[str, Any]:
        # Messages are kept in publishing order: the first is the oldest.
        oldest = next(iter(q.messages.values()), None)
        return {
            "backlog_count": len(q.messages), "backlog_bytes": q.backlog_bytes,
            "oldest_message_timestamp_ms": oldest.timestamp_ms if oldest else 0,
        }  # fmt: skip

    def _remove(self, q: _Queue, m: Message) -> None:
        del q.messages[m.id]
        q.backlog_bytes -= len(m.body.encode())

    def _pull_error(self, q: _Queue) -> PullRefused | None:
        error = q.faults.pull_error
        if error is None or q.pull_errors_left == 0:
            return None
        if q.pull_errors_left is not None:
            q.pull_errors_left -= 1
        q.counts["pull_errors"] += 1
        return PullRefused(error.http_status, error.retry_after)

    def _settle(self, q: _Queue, now: float) -> None:
        """Release the messages whose lease has lapsed."""
        lapsed = [(lease, q.messages[i]) for lease, i in q.leases.items()
                  if q.messages[i].lease_until <= now]  # fmt: skip
        for lease, m in lapsed:
            del q.leases[lease]
            q.counts["expired"] += 1
            self._release(q, m, now)

    def _take_lease(self, q: _Queue, lease_id: str, warnings: dict[str, str]) -> Message | None:
        message_id = q.leases.pop(lease_id, None)
        if message_id is None:
            warnings[lease_id] = "lease is unknown or has expired; the message was not changed"
            return None
        m = q.messages[message_id]
        m.lease_id = None
        return m

    def _release(self, q: _Queue, m: Message, visible_at: float) -> None:
        """Make a message visible again at ``visible_at``, or dead-letter it when its
        deliveries are spent."""
        m.lease_id = None
        if m.attempts > q.config.max_retries:
            self._remove(q, m)
            q.dead.append(m)
            q.counts["dead_lettered"] += 1
        else:
            m.visible_at = visible_at

    def _stats(self, q: _Queue) -> dict[str, Any]:
        now = self._clock()
        self._settle(q, now)
        states = Counter(m.debug(now)["state"] for m in q.messages.values())
        names = ("published", "sent", "acked", "retried", "expired", "dead_lettered", "dropped",
                 "duplicated", "pulls", "acks", "pull_errors")  # fmt: skip
        return {
            "queue_id": q.id, "event_subscription_id": q.subscription_id,
            "visible": states["visible"], "leased": states["leased"],
            "delayed": states["delayed"], **{n: q.counts[n] for n in names},
            "messages": [m.debug(now) for m in q.messages.values()],
            "dead_letters": [m.debug(now) for m in q.dead],
        }  # fmt: skip


def _times(faults: QueueFaultsBody) -> int | None:
    return None if faults.pull_error is None else faults.pull_error.times
