"""The mass-failure brake (DESIGN §9): verdicts on large sweeps, and the operator's way out.

``instance_lost`` is decided from the absence of evidence, so a provider-side blip that answers
"not found" for live instances would fail every running audit at once. The reconciler therefore
*holds* (``AuditFailureHeld``: recorded, status unchanged) the ``instance_lost`` decisions of a
watchdog sweep large enough to trip the brake (at least ``BRAKE_MIN_AUDITS`` audits), and every
``instance_lost`` decision while the brake is engaged.

A sweep's verdict is given here once its answers are all in the projection, or at its deadline
with what is in: the sweep's observations are judged with the reconciler's pure rules on each
audit's history. When at least ``BRAKE_MIN_AUDITS`` of them, and more than ``BRAKE_MIN_SHARE``,
would fail ``instance_lost``, the brake engages (store, metric, log, ``/readyz`` warning) and the
holds stand until an operator releases or discards them; otherwise the sweep's holds are
released (``AuditFailureReleased``), and the reconciler appends each held ``AuditFailed`` in its
own transaction. Release and discard event ids derive from the hold's id, so doing either twice
(a crash, two judges) appends nothing new that the reconciler would act on twice.

Judging is claimed through the store with a lease, so one process judges a sweep and another
takes over if it dies. The watchdog that made a sweep judges it; any watchdog judges sweeps past
their deadline; ``auditrec sweep`` judges its own while it waits.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import structlog

from consumers.eventlog.codec import encode
from consumers.eventlog.port import EventLog
from consumers.runtime.metrics import BRAKE_ENGAGED, DECISIONS_HELD
from projections.audits import AuditReads
from projections.row import AuditRow
from projections.store import ProjectionStore
from projections.values import BrakeState, OpenSweep
from statemachine.events import (
    AuditEvent,
    AuditFailureDiscarded,
    AuditFailureReleased,
    HeldRelease,
    WorkflowStatusObserved,
    derived_id,
)
from statemachine.policy import Policy
from statemachine.rules import judge
from statemachine.state import AuditState, evolve
from statemachine.vocabulary import HELD_ERROR_CODES, STALL_STATUSES

__all__ = ["PRODUCER", "Brake", "Ended", "SweepVerdict", "state_before", "sweep_deadline"]

PRODUCER = "auditrec-brake"
CLAIM_LEASE = 60.0  # seconds a judge holds a sweep before another may take it over
_ANSWERS = frozenset({"WorkflowStatusObserved", "WorkflowProbeFailed"})
_LOST_LOOKING = frozenset({"not_found", "not_attached"})

log = structlog.get_logger("auditrec.brake")


async def state_before(audits: AuditReads, event: AuditEvent) -> AuditState | None:
    """The audit's state just before ``event``, folded from its history in the projection."""
    state: AuditState | None = None
    for entry in await audits.history(event.audit_id):
        if entry.event.event_id == event.event_id:
            return state
        state = evolve(state or AuditState(audit_id=event.audit_id), entry.event)
    return state


@dataclass(frozen=True)
class SweepVerdict:
    sweep_id: str
    verdict: str  # "released" or "held"
    observations: int
    lost: int
    released: int
    engaged: bool  # this sweep engaged the brake


@dataclass(frozen=True)
class Ended:
    """What an operator's release or discard did."""

    how: str
    was_engaged: bool
    holds: list[AuditRow]


class Brake:
    def __init__(
        self,
        event_log: EventLog,
        store: ProjectionStore,
        policy: Policy,
        *,
        owner: str,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        window: timedelta | None = None,
    ) -> None:
        self.log = event_log
        self.store = store
        self.policy = policy
        self.owner = owner
        self.clock = clock
        self.window = window
        self.still_open: set[str] = set()  # the open sweeps when last looked

    def watches(self, size: int) -> bool:
        """Whether a sweep of ``size`` audits has its ``instance_lost`` decisions held until
        its verdict."""
        return self.policy.brake_on and size >= self.policy.brake_min_audits

    async def open(self, sweep_id: str, requests: Sequence[str], deadline: datetime) -> None:
        await self.store.sweeps.open_sweep(sweep_id, requests, self.clock(), deadline)

    async def judge_due(
        self, *, force: bool = False, only: Collection[str] | None = None
    ) -> list[SweepVerdict]:
        """Judge the open sweeps (``only`` those named) whose answers are all in or whose
        deadline passed; ``force``: with what is in (after a drain, nothing more is coming)."""
        verdicts = []
        sweeps = await self.store.sweeps.open_sweeps()
        self.still_open = {s.sweep_id for s in sweeps}
        for sweep in sweeps:
            if only is not None and sweep.sweep_id not in only:
                continue
            verdict = await self.judge(sweep, force=force)
            if verdict is not None:
                verdicts.append(verdict)
                self.still_open.discard(sweep.sweep_id)
        return verdicts

    async def judge(self, sweep: OpenSweep, *, force: bool = False) -> SweepVerdict | None:
        answers = [
            a for a in await self.store.audits.caused_by(sweep.requests) if a.type in _ANSWERS
        ]
        now = self.clock()
        if len(answers) < len(sweep.requests) and not force and now < sweep.deadline:
            return None
        if not await self.store.sweeps.claim_sweep(sweep.sweep_id, self.owner, now, CLAIM_LEASE):
            return None
        observations = [a for a in answers if isinstance(a, WorkflowStatusObserved)]
        lost: list[WorkflowStatusObserved] = []
        for obs in observations:
            d = obs.data
            stall_check = d.progress is not None and d.status in STALL_STATUSES
            if d.status not in _LOST_LOOKING and not stall_check:
                continue
            before = await state_before(self.store.audits, obs)
            verdict = judge(before, obs, self.policy)
            if not (verdict and verdict.failure and verdict.failure.error_code in HELD_ERROR_CODES):
                continue
            if stall_check and not self.policy.may_terminate(before.workflow if before else None):
                continue  # a stall reported, not acted on: nothing held
            lost.append(obs)
        trips = self.policy.brake_trips(len(lost), len(observations))
        engaged = False
        if trips:
            engaged = await self.store.brake.engage_brake(
                sweep.sweep_id, len(lost), len(observations), now
            )
            if engaged:
                log.warning(
                    "mass-failure brake engaged: instance_lost decisions are held",
                    sweep_id=sweep.sweep_id,
                    lost=len(lost),
                    observations=len(observations),
                    min_audits=self.policy.brake_min_audits,
                    min_share=self.policy.brake_min_share,
                    fix="check the Workflows API, then `auditrec brake release` or "
                    "`auditrec brake discard`",
                )
        keep = trips or (await self.store.brake.state()).engaged
        released = 0
        if not keep and lost:
            reason = (
                f"sweep {sweep.sweep_id}: {len(lost)} of {len(observations)} observations "
                f"instance_lost, under the brake (≥ {self.policy.brake_min_audits} and more "
                f"than {self.policy.brake_min_share:.0%})"
            )
            events = [
                _release(derived_id(obs.event_id, "reconciler-hold"), obs.audit_id, now, reason)
                for obs in lost
            ]
            await self.log.append([encode(self.log.topics.lifecycle, e) for e in events])
            released = len(events)
        verdict_name = "held" if keep else "released"
        await self.store.sweeps.close_sweep(
            sweep.sweep_id, verdict_name, len(lost), len(observations), now
        )
        log.info(
            "sweep judged",
            sweep_id=sweep.sweep_id,
            verdict=verdict_name,
            lost=len(lost),
            observations=len(observations),
            answers=len(answers),
            requests=len(sweep.requests),
        )
        await self.report()
        return SweepVerdict(
            sweep.sweep_id, verdict_name, len(observations), len(lost), released, engaged
        )

    async def judge_window(self) -> bool:
        """The sliding window (``AUDITREC_BRAKE_WINDOW``): decisions that belong to no sweep
        (a status read's, a death the event subscription reported and a probe found gone) are
        judged here. When the ``instance_lost`` failures found outside the watchdog's sweeps
        within the window (and since the brake last ended) reach ``BRAKE_MIN_AUDITS``, the
        brake engages, and the reconciler holds every further ``instance_lost`` decision until
        an operator releases or discards them. True when it engaged now."""
        if self.window is None or not self.policy.brake_on:
            return False
        state = await self.store.brake.state()
        if state.engaged:
            return False
        now = self.clock()
        since = now - self.window
        if state.ended_at is not None and state.ended_at > since:
            since = state.ended_at
        counts = await self.store.audits.failure_counts(since)
        lost = sum(
            n
            for (code, by), n in counts.items()
            if code in HELD_ERROR_CODES and by is not None and by != "watchdog"
        )
        # Stalls' terminations asked for within the window, whichever ticks asked: a burst
        # spread over ticks too small to be held each is braked here.
        lost += await self.store.audits.terminations_requested(since)
        if lost < self.policy.brake_min_audits:
            return False
        window = f"window-{now.strftime('%Y%m%dT%H%M%S')}"
        engaged = await self.store.brake.engage_brake(window, lost, lost, now)
        if engaged:
            log.warning(
                "mass-failure brake engaged by the sliding window: instance_lost decisions "
                "are held",
                lost=lost,
                window_s=self.window.total_seconds(),
                min_audits=self.policy.brake_min_audits,
                fix="check the Workflows API, then `auditrec brake release` or "
                "`auditrec brake discard`",
            )
            await self.report()
        return engaged

    # -- the operator's way out ---------------------------------------------------------------

    async def status(self, limit: int | None = None) -> tuple[BrakeState, list[AuditRow]]:
        state = await self.store.brake.state()
        return state, await self.store.brake.held_audits(limit)

    async def end(self, how: str, actor: str, reason: str | None, *, dry_run: bool) -> Ended:
        """``release``: the held decisions take effect (the audits fail); ``discard``: they are
        dropped (the audits keep running and are probed again). Either disengages the brake."""
        assert how in ("released", "discarded")
        if dry_run:
            state, holds = await self.status()
            return Ended(how, state.engaged, holds)
        now = self.clock()
        before = await self.store.brake.end_brake(how, actor, now)  # reconcilers stop holding first
        holds = await self.store.brake.held_audits()
        events: list[AuditEvent] = []
        for row in holds:
            held_id = row.state.held_decision_id
            assert held_id is not None
            if how == "released":
                events.append(_release(held_id, row.audit_id, now, reason, actor))
            else:
                events.append(
                    AuditFailureDiscarded(
                        event_id=derived_id(held_id, "discard"),
                        audit_id=row.audit_id,
                        occurred_at=now,
                        producer=PRODUCER,
                        data=HeldRelease(held_id=uuid.UUID(held_id), actor=actor, reason=reason),
                    )
                )
        if events:
            await self.log.append([encode(self.log.topics.lifecycle, e) for e in events])
        log.warning(
            f"mass-failure brake {how}",
            actor=actor,
            reason=reason,
            holds=len(holds),
            was_engaged=before.engaged,
        )
        await self.report()
        return Ended(how, before.engaged, holds)

    async def report(self) -> BrakeState:
        """Refresh the brake's metrics from the store."""
        state = await self.store.brake.state()
        BRAKE_ENGAGED.set(1 if state.engaged else 0)
        DECISIONS_HELD.set(len(await self.store.brake.held_audits()))
        return state


def _release(
    held_id: str | uuid.UUID,
    audit_id: str,
    at: datetime,
    reason: str | None,
    actor: str = PRODUCER,
) -> AuditFailureReleased:
    return AuditFailureReleased(
        event_id=derived_id(str(held_id), "release"),
        audit_id=audit_id,
        occurred_at=at,
        producer=PRODUCER,
        data=HeldRelease(held_id=uuid.UUID(str(held_id)), actor=actor, reason=reason),
    )


def sweep_deadline(at: datetime, answer_within: timedelta | None) -> datetime:
    """When a sweep is judged with whatever answers are in: its callers' bound, plus time for
    the answers to reach the projection."""
    return at + (answer_within or timedelta(seconds=60)) + timedelta(seconds=30)
