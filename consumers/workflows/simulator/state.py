"""The Workflows simulator's in-memory state: workflows, instances, faults and request
statistics, behind one lock; the account's queues (:mod:`.eventqueues`), to which every status
change of an instance is published; and the webhook receivers (:mod:`.receivers`).

The JSON formats of a seed and of the control API bodies are in :mod:`.bodies`; the HTTP side
is :mod:`.app`; :mod:`.server` documents the whole simulator and runs it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from consumers.workflows.simulator.bodies import (
    DEFAULT_WORKFLOW,
    VERSION_ID,
    ErrorValue,
    FaultKind,
    InstanceBody,
    QueueBody,
    QueueFaultsBody,
    Seed,
    StepBody,
    WebhookBody,
    iso,
)
from consumers.workflows.simulator.eventqueues import Queues
from consumers.workflows.simulator.receivers import Receivers
from statemachine.vocabulary import WORKFLOW_STATUSES, WORKFLOW_TERMINAL_STATUSES

__all__ = [
    "LISTING",
    "STATUSES",
    "TERMINAL",
    "AlreadyFinished",
    "Fault",
    "Instance",
    "Simulator",
    "iso",
]

STATUSES = WORKFLOW_STATUSES
TERMINAL = WORKFLOW_TERMINAL_STATUSES

# The fault id and request-count key of the instance listing (no instance id can be this: ids
# are one path segment, and the listing has none).
LISTING = "@instances"
_AUTO: Any = object()  # "not given": derive the timestamp from the status


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Fault:
    kind: FaultKind
    latency_ms: float = 0.0
    retry_after: float | None = None
    times: int | None = None
    http_status: int | None = None
    headers: dict[str, str] | None = None
    body: str | None = None


class AlreadyFinished(Exception):
    """A terminate asked of an instance that has ended (its status is the argument)."""


# Every step's config, as the API reports it (the SDK's defaults).
_STEP_CONFIG = {"retries": {"limit": 5, "delay": 1000, "backoff": "exponential"},
                "timeout": "10 minutes"}  # fmt: skip


@dataclass(slots=True)
class Instance:
    id: str
    status: str
    error: ErrorValue
    queued: datetime
    start: datetime | None
    end: datetime | None
    output: Any = None
    params: dict[str, Any] = field(default_factory=dict)
    modified: datetime = field(default_factory=_now)
    step: StepBody | None = None
    raw_steps: list[Any] | None = None
    patches: Counter[str] = field(default_factory=Counter)  # status PATCHes, by action
    terminations: int = 0  # terminates that ended it

    def result(self, *, simple: bool = False) -> dict[str, Any]:
        """The API's ``result``; ``simple`` (``?simple=true``) leaves the steps out."""
        steps = [] if simple else self.steps()
        count = sum(1 for s in steps if isinstance(s, dict) and s.get("type") == "step")
        return {
            "status": self.status, "error": self.error, "output": self.output,
            "params": self.params, "queued": iso(self.queued), "start": iso(self.start),
            "end": iso(self.end), "success": self.status == "complete" if self.end else None,
            "trigger": {"source": "api"}, "versionId": VERSION_ID,
            "step_count": count, "steps": steps,
        }  # fmt: skip

    def view(self) -> dict[str, Any]:
        """What the control API shows: the full result, and the status PATCHes received."""
        return self.result() | {"patches": dict(self.patches), "terminations": self.terminations}

    def steps(self) -> list[Any]:
        """``result.steps``: the raw list given, else the one ``step`` drawn from the status."""
        if self.raw_steps is not None:
            return list(self.raw_steps)
        if self.step is None:
            return []
        return _draw_steps(self.step, self.status, self.start or self.queued, self.modified)

    def summary(self, workflow: str) -> dict[str, Any]:
        return {
            "id": self.id, "status": self.status, "created_on": iso(self.queued),
            "modified_on": iso(self.modified), "started_on": iso(self.start),
            "ended_on": iso(self.end), "version_id": VERSION_ID,
            "workflow_id": workflow,
        }  # fmt: skip


def _draw_steps(step: StepBody, status: str, start: datetime, now: datetime) -> list[Any]:
    """One ``type: "step"`` entry in Cloudflare's shape, one second per attempt from its start:
    still running (the latest attempt open) unless the instance is ``waiting`` (the step
    succeeded, then a ``sleep`` entry still sleeping) or has ended (the step ended with it:
    succeeded when complete, else its latest attempt failed too)."""
    began = step.started_at or start
    ended = status in TERMINAL or status == "waiting"
    failed_last = ended and status != "complete" and status != "waiting"
    attempts: list[dict[str, Any]] = []
    for n in range(step.attempts):
        at = began + timedelta(seconds=n)
        latest = n == step.attempts - 1
        error = step.error if (not latest or failed_last) else None
        if latest and not ended:
            attempts.append({"start": iso(at), "end": None, "success": None, "error": None})
        else:
            attempts.append({"start": iso(at), "end": iso(at + timedelta(seconds=1)),
                             "success": error is None, "error": _error_object(error)})  # fmt: skip
    end = began + timedelta(seconds=step.attempts) if ended else None
    entry = {
        "type": "step", "name": step.name, "start": iso(began), "end": iso(end),
        "success": (not failed_last) if ended else None, "attempts": attempts,
        "config": _STEP_CONFIG, "output": None,
    }  # fmt: skip
    steps: list[Any] = [entry]
    if status == "waiting":
        steps.append({"type": "sleep", "name": "sleep-1", "start": iso(end or now), "end": None,
                      "finished": False})  # fmt: skip
    return steps


def _error_object(error: ErrorValue) -> dict[str, str | None] | None:
    """An attempt's error as the API gives it: ``{"name", "message"}``."""
    if error is None or isinstance(error, dict):
        return error
    return {"name": "Error", "message": error}


class Simulator:
    """In-memory state of the simulated account; thread-safe (the server runs in its own thread)."""

    def __init__(self, *, token: str | None = None, latency_ms: float = 0.0) -> None:
        self._lock = threading.Lock()
        self.token = token
        self._first_token = token  # what a reset returns to: the token it was started with
        self.latency_ms = latency_ms
        self.listing = True  # False: an API without the instance listing
        self._workflows: dict[str, dict[str, Instance]] = {DEFAULT_WORKFLOW: {}}
        self._faults: dict[str, Fault] = {}
        self._requests: Counter[str] = Counter()
        self._terminates: Counter[str] = Counter()  # terminate PATCHes by instance id
        self._total = 0
        self._arrivals: deque[float] = deque(maxlen=100_000)  # monotonic seconds
        self._in_flight = 0
        self._max_in_flight = 0
        self.queues = Queues()
        self.webhooks = Receivers()

    # --- state -----------------------------------------------------------------------------

    def add_workflow(self, workflow: str) -> None:
        with self._lock:
            self._workflows.setdefault(workflow, {})

    def set_instance(
        self,
        instance_id: str,
        status: str = "running",
        *,
        workflow: str = DEFAULT_WORKFLOW,
        error: ErrorValue = None,
        start: datetime | None = _AUTO,
        end: datetime | None = _AUTO,
        queued: datetime | None = None,
        output: Any = None,
        params: dict[str, Any] | None = None,
        step: StepBody | dict[str, Any] | None = None,
        steps: list[Any] | None = None,
    ) -> dict[str, Any]:
        """Create or replace an instance (creating the workflow too); returns its API result.

        ``start``/``end`` left out are derived: started unless queued, ended now if terminal.
        ``step`` (a :class:`~.bodies.StepBody` or its fields) is the step it is at; ``steps`` a
        raw ``result.steps`` given as is.
        """
        if not instance_id or not status:
            raise ValueError("instance_id and status must be non-empty")
        now = _now()
        if start is _AUTO:
            start = None if status == "queued" else now
        if end is _AUTO:
            end = now if status in TERMINAL else None
        if isinstance(step, dict):
            step = StepBody.model_validate(step)
        inst = Instance(instance_id, status, error, queued or start or now, start, end, output,
                        dict(params or {}), now, step, steps)  # fmt: skip
        with self._lock:
            instances = self._workflows.setdefault(workflow, {})
            before = instances.get(instance_id)
            instances[instance_id] = inst
            if before is None or before.status != status:
                self.queues.status_changed(workflow, instance_id, status, now)
            return inst.result()

    def delete_instance(self, instance_id: str, *, workflow: str = DEFAULT_WORKFLOW) -> bool:
        with self._lock:
            return self._workflows.get(workflow, {}).pop(instance_id, None) is not None

    def get_instance(
        self, instance_id: str, *, workflow: str = DEFAULT_WORKFLOW
    ) -> dict[str, Any] | None:
        """Its API result (with its steps), or ``None``."""
        with self._lock:
            inst = self._workflows.get(workflow, {}).get(instance_id)
            return None if inst is None else inst.result()

    def instance_view(
        self, instance_id: str, *, workflow: str = DEFAULT_WORKFLOW
    ) -> dict[str, Any] | None:
        """What ``GET /_sim/workflows/{wf}/instances/{id}`` shows: the API result and the status
        PATCHes it received (``patches``: by action; ``terminations``: those that ended it)."""
        with self._lock:
            inst = self._workflows.get(workflow, {}).get(instance_id)
            return None if inst is None else inst.view()

    def set_fault(self, instance_id: str, kind: FaultKind, **options: Any) -> None:
        """Make the next ``times`` requests for ``instance_id`` misbehave (see
        :mod:`.server`)."""
        with self._lock:
            if kind == "none":
                self._faults.pop(instance_id, None)
            else:
                self._faults[instance_id] = Fault(kind, **options)

    def clear_fault(self, instance_id: str) -> None:
        self.set_fault(instance_id, "none")

    def reset(self) -> None:
        """Back to a fresh simulator: one empty workflow, no faults or latency, the token it was
        made with, no stats."""
        with self._lock:
            self._workflows = {DEFAULT_WORKFLOW: {}}
            self._faults.clear()
            self._requests.clear()
            self._terminates.clear()
            self._total = 0
            self._arrivals.clear()
            self._max_in_flight = self._in_flight
            self.latency_ms = 0.0
            self.listing = True
            self.token = self._first_token
            self.queues.clear()
            self.webhooks.clear()

    def load_seed(self, seed: dict[str, Any]) -> None:
        """Apply a seed document: ``{workflows: [..], latency_ms, instances: [{workflow?, id,
        status, error?, start?, end?, step?, steps?}], faults: [{id, kind, ...}], queues: [{id,
        ...}], webhooks: [{name, secret?, ...}]}``."""
        doc = Seed.model_validate(seed)
        for name in doc.workflows:
            self.add_workflow(name)
        if doc.latency_ms is not None:
            self.latency_ms = doc.latency_ms
        if doc.listing is not None:
            self.listing = doc.listing
        for item in doc.instances:
            self.put_instance(item.workflow, item.id, item)
        for f in doc.faults:
            self.set_fault(f.id, f.kind, **f.model_dump(exclude={"id", "kind"}))
        for q in doc.queues:
            self.queues.put(q.id, q)
        for w in doc.webhooks:
            self.webhooks.put(w.name, w)

    # --- queues (the state is :attr:`queues`; these are shortcuts for tests) ------------------

    def add_queue(
        self,
        queue_id: str,
        *,
        workflows: list[str] | None = None,
        events: list[str] | None = None,
        max_retries: int = 3,
        **faults: Any,
    ) -> dict[str, Any]:
        """Create or replace a queue subscribed to ``workflows``' ``events`` (``None``: all);
        ``faults`` are :class:`~.bodies.QueueFaultsBody` fields. Its stats."""
        config = QueueBody(workflows=workflows, events=events, max_retries=max_retries,
                           faults=QueueFaultsBody(**faults))  # fmt: skip
        return self.queues.put(queue_id, config)

    def queue_stats(self, queue_id: str) -> dict[str, Any]:
        return self.queues.stats(queue_id)

    def add_webhook(self, name: str, secret: str | None = None, **faults: Any) -> dict[str, Any]:
        """Create or replace a webhook receiver (``faults``: ``fail``, ``status``, ``down``,
        ``delay``); its state."""
        return self.webhooks.put(name, WebhookBody(secret=secret, **faults))

    # --- stats -----------------------------------------------------------------------------

    def requests_for(self, instance_id: str) -> int:
        """API requests received for one instance id (any method, counted on arrival)."""
        with self._lock:
            return self._requests[instance_id]

    def terminates_for(self, instance_id: str) -> int:
        """Terminate PATCHes received for one instance id (in any workflow, whatever they
        answered, the instance replaced or deleted since)."""
        with self._lock:
            return self._terminates[instance_id]

    def busiest_window(self, seconds: float) -> int:
        """The most requests that arrived within any ``seconds`` (the last 100 000 kept)."""
        with self._lock:
            times = list(self._arrivals)
        most, start = 0, 0
        for end, at in enumerate(times):
            while times[start] <= at - seconds:
                start += 1
            most = max(most, end - start + 1)
        return most

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "total": self._total, "by_instance": dict(self._requests),
                "in_flight": self._in_flight, "max_in_flight": self._max_in_flight,
                "terminates": dict(self._terminates),
            }  # fmt: skip

    # --- for the request handlers (server thread) -------------------------------------------

    def put_instance(self, workflow: str, instance_id: str, body: InstanceBody) -> dict[str, Any]:
        given = body.model_fields_set
        return self.set_instance(
            instance_id, body.status, workflow=workflow, error=body.error,
            start=body.start if "start" in given else _AUTO,
            end=body.end if "end" in given else _AUTO,
            queued=body.queued, output=body.output, params=body.params, step=body.step,
            steps=body.steps,
        )  # fmt: skip

    def arrive(self, instance_id: str | None) -> tuple[Fault | None, float]:
        """Count a request on arrival; its fault (one use of it) and delay in seconds."""
        with self._lock:
            self._total += 1
            self._arrivals.append(time.monotonic())
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
            fault = None
            if instance_id is not None:
                self._requests[instance_id] += 1
                fault = self._faults.get(instance_id)
                if fault is not None and fault.times is not None:
                    if fault.times <= 1:
                        del self._faults[instance_id]
                    else:
                        self._faults[instance_id] = replace(fault, times=fault.times - 1)
            delay = self.latency_ms + (fault.latency_ms if fault else 0.0)
            return fault, delay / 1000

    def leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    @contextlib.contextmanager
    def locked_workflows(self) -> Iterator[dict[str, dict[str, Instance]]]:
        """The workflows (name → instance id → instance) with the lock held: keep it short."""
        with self._lock:
            yield self._workflows

    def change_status(
        self, workflow: str, inst: Instance, action: Any
    ) -> tuple[str, datetime] | None:
        """Apply a status action (``pause``, ``resume``, ``terminate``, ``restart``) to an
        instance of ``workflow``; its new status and the time, or ``None`` for an unknown
        action. A changed status (and every restart: the instance starts again) is published.
        A terminate of an instance that has ended (complete, errored, terminated) raises
        :class:`AlreadyFinished` and changes nothing. Every PATCH is counted in the instance's
        ``patches``."""
        now = _now()
        with self._lock:
            inst.patches[str(action)[:32]] += 1
            if action == "terminate":
                self._terminates[inst.id] += 1
            before = inst.status
            if action == "pause":
                inst.status = "paused"
            elif action == "resume":
                inst.status = "running"
            elif action == "terminate":
                if before in TERMINAL:
                    raise AlreadyFinished(before)
                inst.status, inst.end = "terminated", now
                inst.terminations += 1
            elif action == "restart":
                inst.status, inst.queued, inst.start, inst.end, inst.error, inst.step = (
                    "running", now, now, None, None, None)  # fmt: skip
                inst.raw_steps = None
            else:
                return None
            inst.modified = now
            if inst.status != before or action == "restart":
                self.queues.status_changed(workflow, inst.id, inst.status, now)
            return inst.status, now
