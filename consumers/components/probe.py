"""The probe: answers probe requests with what the Workflows API says. It decides nothing.

Each ``ProbeRequested`` yields exactly one ``WorkflowStatusObserved`` or
``WorkflowProbeFailed`` whose id is derived from the request's id and whose ``causation_id``
is the request's id. Requests for the same instance in one batch share one API call, which
takes a slot of the probe budget for the status reads only when every request for it is a
status read's (their share of the budget caps them), else for the watchdog or the operator.
An audit without an instance id is observed ``not_attached`` without a call, and one whose
instance a watchdog tick found alive in the workflow's listing (``data.listed``) is observed
from the listing (``source: "listing"``) without a call. Requests older
than ``max_age`` are dropped (the watchdog will ask again) so a backlog never bursts the API.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Literal, NamedTuple
from uuid import UUID

import structlog
from pydantic import ValidationError

from consumers.components.base import LogConsumer
from consumers.eventlog.codec import decode_probe, describe, encode
from consumers.eventlog.port import EventLog, OutRecord, Record
from consumers.runtime.metrics import PROBE_BUDGET_LEFT, PROBES, TERMINATIONS
from consumers.workflows.answers import PROBABLE_CAUSE, StepState, Termination
from consumers.workflows.client import InstanceStatus, ProbeFailure, WorkflowsClient
from consumers.workflows.ratelimit import OTHER, STALL, TERMINATE, WATCHDOG
from statemachine.errors import AuditrecError, DecodeError
from statemachine.events import (
    Listed,
    ProbeFailureReason,
    ProbeRequested,
    StepEvidence,
    Trigger,
    WorkflowProbeFailed,
    WorkflowProbeFailedData,
    WorkflowStatusObserved,
    WorkflowStatusObservedData,
    derived_id,
)
from statemachine.vocabulary import OBSERVED_STATUSES

__all__ = ["PRODUCER", "Probe"]

PRODUCER = "auditrec-probe"
KNOWN_STATUSES = frozenset(OBSERVED_STATUSES)
Source = Literal["instance", "listing"]
log = structlog.get_logger("auditrec.probe")


WARN_EVERY = 60.0  # seconds between warnings about probes failing for one reason
Request = tuple[tuple[str, int], ProbeRequested]  # a request, and the partition it came from


def _wait(group: list[Request], now: datetime) -> float | None:
    """How long the requests for one instance may wait for the API: the latest bound given."""
    bounds = [r.data.answer_by for _, r in group if r.data.answer_by is not None]
    return max(0.0, (max(bounds) - now).total_seconds()) if bounds else None


def _spender(group: list[Request]) -> str:
    """Whose budget slot the one call for an instance takes: the status reads' only when
    every request for it is a status read's (then their share caps it), else the watchdog's
    when it asked, else the operator's (``manual``)."""
    triggers = {r.data.trigger for _, r in group}
    for trigger in (Trigger.WATCHDOG, Trigger.MANUAL, Trigger.ON_DEMAND, Trigger.SUBSCRIPTION):
        if trigger in triggers:
            return trigger.value
    return OTHER


class Asked(NamedTuple):
    """One call to the API, shared by the requests that ask the same."""

    instance: str | None
    workflow: str | None  # None: the default workflow
    steps: bool  # a stall check: read with the steps
    terminate: bool


def _evidence(step: StepState) -> StepEvidence:
    error = step.error
    if isinstance(error, dict):
        error = {k: error.get(k) for k in ("name", "message")}
    return StepEvidence(
        name=step.name[:2000] or "?",
        started_at=step.started_at,
        attempts=step.attempts,
        retrying=step.retrying,
        error=error,
    )


def _listed(group: list[Request]) -> Listed | None:
    """The latest listing's word on the instance when every request for it carries one (a
    request without, e.g. a status read's, asks the instance itself for all of them)."""
    listed = [r.data.listed for _, r in group]
    if not listed or any(x is None for x in listed):
        return None
    return max((x for x in listed if x is not None), key=lambda x: x.at)


class Probe(LogConsumer):
    name = "probe"
    transactional = True
    max_records = 200

    def __init__(
        self,
        event_log: EventLog,
        client: WorkflowsClient,
        *,
        max_age: timedelta = timedelta(minutes=10),
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        default_workflow: str = "site-audit",
        terminable: frozenset[str] = frozenset(),
    ) -> None:
        """``terminable``: the workflows whose instances a termination request may terminate
        (``AUDITREC_TERMINATE_WORKFLOWS``); a request for any other is only read."""
        super().__init__(event_log, [event_log.topics.probe_requests])
        self.client = client
        self.default_workflow = default_workflow
        self.terminable = terminable
        self.max_age = max_age
        self.clock = clock
        self.probed = 0
        self._failures: Counter[ProbeFailureReason] = Counter()
        self._warned: dict[ProbeFailureReason, float] = {}

    async def _handle(self, records: list[Record]) -> int:
        outputs: dict[tuple[str, int], list[OutRecord]] = {}
        requests: list[Request] = []
        records_by_id: dict[UUID, Record] = {}
        now = self.clock()
        for record in records:
            tp = (record.topic, record.partition)
            out = outputs.setdefault(tp, [])
            try:
                request = decode_probe(record.value)
            except DecodeError as exc:
                self.dead_letter(record, str(exc), out)
                continue
            if self.expired(request, now):
                log.info("probe request expired", audit_id=request.audit_id)
                continue
            requests.append((tp, request))
            records_by_id[request.event_id] = record
        requests = await self.wanted(requests)
        by_instance: dict[Asked, list[Request]] = {}
        for item in requests:
            by_instance.setdefault(self._asked(item[1]), []).append(item)
        results = await asyncio.gather(
            *(
                self._probe(asked, self.bound(group, now), _listed(group), _spender(group))
                for asked, group in by_instance.items()
            )
        )
        if any(self.unanswered(result) for result, _, _ in results):
            self.rewind(records)  # read again, answered when the budget allows
            return 0
        lifecycle = self.log.topics.lifecycle
        for (asked, group), (result, observed_at, source) in zip(
            by_instance.items(), results, strict=True
        ):
            for tp, request in group:
                try:
                    cause = self.cause(request, records_by_id[request.event_id])
                    event = self._answer(
                        request, asked.instance, result, observed_at, source, cause
                    )
                    outputs[tp].append(encode(lifecycle, event))
                except Exception as exc:  # one request must not hold back its partition
                    self.cannot_handle(records_by_id[request.event_id], exc, outputs[tp])
                    continue
                self.probed += 1
        PROBE_BUDGET_LEFT.set(await self.client.budget_left())
        await self.commit(records, outputs)
        return len(records)

    def expired(self, request: ProbeRequested, now: datetime) -> bool:
        """Whether ``request`` is too old to answer (the watchdog asks again)."""
        return now - request.occurred_at > self.max_age

    async def wanted(self, requests: list[Request]) -> list[Request]:
        """The requests of a batch to answer (all of them)."""
        return requests

    def bound(self, group: list[Request], now: datetime) -> float | None:
        """How long the call for one instance may wait for the budget or a 429 pause."""
        return _wait(group, now)

    def unanswered(self, result: InstanceStatus | ProbeFailure) -> bool:
        """Whether ``result`` leaves its request to be asked again rather than answered
        (never: a failed probe is recorded, and the watchdog asks again)."""
        return False

    def rewind(self, records: list[Record]) -> None:
        """Read ``records`` again: each partition from its first record of the batch."""
        assert self.consumer is not None
        first: dict[tuple[str, int], int] = {}
        for record in records:
            tp = (record.topic, record.partition)
            first[tp] = min(first.get(tp, record.offset), record.offset)
        for tp, offset in first.items():
            self.seek(self.consumer, tp, offset)

    def cause(self, request: ProbeRequested, record: Record) -> UUID | str:
        """What the answer's event id derives from: the request's id (a request is answered
        once: its answer and offset are committed together)."""
        return request.event_id

    def _asked(self, request: ProbeRequested) -> Asked:
        """What one call answers: the instance in its workflow, read with its steps for a
        stall check, terminated first when the reconciler asked (and may)."""
        d = request.data
        workflow = d.workflow if d.workflow != self.default_workflow else None
        terminate = d.terminate and (workflow or self.default_workflow) in self.terminable
        if d.terminate and not terminate:
            log.warning(
                "termination refused: the workflow is not in AUDITREC_TERMINATE_WORKFLOWS",
                audit_id=request.audit_id,
                workflow=workflow or self.default_workflow,
                workflow_instance_id=d.workflow_instance_id,
            )
        return Asked(d.workflow_instance_id, workflow, d.progress is not None, terminate)

    async def _probe(
        self, asked: Asked, wait: float | None, listed: Listed | None, spender: str
    ) -> tuple[InstanceStatus | ProbeFailure, datetime, Source]:
        instance = asked.instance
        if instance is None:
            return InstanceStatus("not_attached", None, None), self.clock(), "instance"
        if listed is not None and not asked.steps and not asked.terminate:
            # alive when the tick read the listing: no request of its own
            return InstanceStatus(listed.status, None, None), listed.at, "listing"
        try:
            result: InstanceStatus | ProbeFailure | None = None
            if asked.terminate:
                result = await self._terminate(asked, wait)
            if result is None:
                result = await self.client.get_instance(
                    instance,
                    workflow=asked.workflow,
                    steps=asked.steps,
                    wait=wait,
                    spender=STALL if asked.steps and spender == WATCHDOG else spender,
                )
        except AuditrecError:
            # Our own trouble (the client stopped, the store behind the budget unreachable) is
            # no fact about the workflow: the batch is not committed and is handled again.
            raise
        except Exception as exc:  # one bad answer must not hold back the batch
            log.warning("probe raised", workflow_instance_id=instance, error=repr(exc)[:300])
            result = ProbeFailure(
                ProbeFailureReason.INVALID_RESPONSE, None, f"{type(exc).__name__}: {exc}"[:500]
            )
        outcome = result.status if isinstance(result, InstanceStatus) else result.reason.value
        PROBES.labels(outcome).inc()
        if isinstance(result, ProbeFailure):
            self._failing(result)
        return result, self.clock(), "instance"

    async def _terminate(self, asked: Asked, wait: float | None) -> ProbeFailure | None:
        """Terminate a stalled audit's instance: ``None`` when it is terminated now, had ended
        already (409) or is gone (then it is read, and the reconciler judges that); else why
        the API did not."""
        assert asked.instance is not None
        done = await self.client.terminate(
            asked.instance, workflow=asked.workflow, wait=wait, spender=TERMINATE
        )
        TERMINATIONS.labels(done.outcome if isinstance(done, Termination) else "failed").inc()
        if isinstance(done, ProbeFailure):
            log.warning(
                "termination failed: asked again while the audit stays stalled",
                workflow_instance_id=asked.instance,
                reason=done.reason.value,
                detail=done.detail[:200],
            )
            return ProbeFailure(done.reason, done.http_status, f"terminate: {done.detail}")
        log.info(
            "instance terminated (stalled)" if done.outcome == "terminated" else "termination",
            workflow_instance_id=asked.instance,
            workflow=asked.workflow or self.default_workflow,
            outcome=done.outcome,
        )
        return None

    def _failing(self, failure: ProbeFailure) -> None:
        """One warning per reason per :data:`WARN_EVERY`, with the count and the likely cause."""
        reason = failure.reason
        self._failures[reason] += 1
        now = time.monotonic()
        if now - self._warned.get(reason, -WARN_EVERY) < WARN_EVERY:
            return
        log.warning(
            "probes failing",
            reason=reason.value,
            count=self._failures.pop(reason),
            cause=PROBABLE_CAUSE[reason],
            last=failure.detail[:200],
        )
        self._warned[reason] = now

    @classmethod
    def _answer(
        cls,
        request: ProbeRequested,
        instance: str | None,
        result: InstanceStatus | ProbeFailure,
        observed_at: datetime,
        source: Source = "instance",
        cause: UUID | str | None = None,
    ) -> WorkflowStatusObserved | WorkflowProbeFailed:
        """The observation; an answer that makes no valid observation is recorded as such."""
        try:
            return cls._observation(request, instance, result, observed_at, source, cause)
        except ValidationError as exc:
            detail = f"unusable answer: {describe(exc)}"
            failure = ProbeFailure(ProbeFailureReason.INVALID_RESPONSE, None, detail)
            return cls._observation(request, instance, failure, observed_at, cause=cause)

    @staticmethod
    def _observation(
        request: ProbeRequested,
        instance: str | None,
        result: InstanceStatus | ProbeFailure,
        observed_at: datetime,
        source: Source = "instance",
        cause: UUID | str | None = None,
    ) -> WorkflowStatusObserved | WorkflowProbeFailed:
        common = {
            "event_id": derived_id(cause or request.event_id, "probe-observation"),
            "audit_id": request.audit_id,
            "occurred_at": observed_at,
            "producer": PRODUCER,
            "causation_id": request.event_id,
            "correlation_id": request.correlation_id,
        }
        if isinstance(result, InstanceStatus):
            if result.status not in KNOWN_STATUSES:
                log.warning(
                    "unknown workflow status", audit_id=request.audit_id, status=result.status
                )
                result = InstanceStatus("unknown", result.error, result.ended_at)
            error = result.error
            if isinstance(error, dict):
                error = {k: error.get(k) for k in ("name", "message")}
            step = getattr(result, "step", None) if request.data.progress is not None else None
            return WorkflowStatusObserved(
                **common,
                data=WorkflowStatusObservedData(
                    workflow=request.data.workflow,
                    progress=request.data.progress,
                    step=_evidence(step) if step is not None else None,
                    terminate=request.data.terminate,
                    workflow_instance_id=instance,
                    status=result.status,
                    error=error,
                    workflow_ended_at=result.ended_at,
                    trigger=request.data.trigger,
                    observed_at=observed_at,
                    sweep_id=request.data.sweep_id,
                    sweep_size=request.data.sweep_size,
                    source=source,
                    actor=request.data.actor,
                    on_behalf_of=request.data.on_behalf_of,
                    notice=request.data.notice,
                ),
            )
        return WorkflowProbeFailed(
            **common,
            data=WorkflowProbeFailedData(
                workflow_instance_id=instance,
                reason=result.reason,
                http_status=result.http_status,
                detail=result.detail[:2000],
                trigger=request.data.trigger,
                observed_at=observed_at,
                sweep_id=request.data.sweep_id,
                sweep_size=request.data.sweep_size,
                actor=request.data.actor,
                on_behalf_of=request.data.on_behalf_of,
            ),
        )
