"""Waiting for what probe requests led to, by following causation chains in the projection.

``ProbeRequested`` ─causation→ observation (``WorkflowStatusObserved`` / ``WorkflowProbeFailed``)
─causation→ decision (``AuditFailed`` / ``AuditFailureSimulated``). Whether an observation calls
for a decision is judged here with the same pure rules the reconciler uses, on the audit's
history up to that observation — so a caller knows what to wait for, and stops waiting the
moment the last expected outcome is in the projection.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from consumers.components.brake import state_before
from projections.row import AuditRow
from projections.store import ProjectionStore
from statemachine.events import ProbeRequested
from statemachine.machine import FAILED, RUNNING
from statemachine.policy import Policy
from statemachine.rules import judge
from statemachine.state import AuditState
from statemachine.vocabulary import HEALTHY_STATUSES, HELD_ERROR_CODES

__all__ = ["Outcome", "OutcomeResult", "Summary", "await_outcomes"]

_DECISIONS = ("AuditFailed", "AuditFailureSimulated")


OutcomeResult = Literal[
    "failed", "would_fail", "held", "healthy", "unchanged", "probe_error", "pending"
]


class Outcome(BaseModel):
    """What one probe request found, and what the reconciler made of it."""

    audit_id: str
    request_id: str = Field(description="The ProbeRequested event's id.")
    result: OutcomeResult = Field(
        default="pending",
        description="`failed`: failed in this response; `would_fail`: shadow mode; `held`: "
        "the failure is held by the mass-failure brake (the audit keeps running); `healthy` / "
        "`unchanged`: still running; `probe_error`: the Workflows API could not tell; "
        "`pending`: the outcome did not arrive in time.",
    )
    rule: str | None = None
    reason: str | None = None
    error_code: str | None = None
    observed_status: str | None = None
    probe_error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


@dataclass
class Summary:
    candidates: int
    outcomes: list[Outcome] = field(default_factory=list)
    candidate_rows: list[AuditRow] = field(default_factory=list)
    sweep_id: str | None = None
    elapsed_s: float = 0.0
    skipped: bool = False
    brake: dict[str, Any] | None = None
    """The mass-failure brake when the sweep ended: ``engaged``, ``since``, ``sweep_id``
    (the sweep that engaged it) and ``held`` (decisions it holds in all)."""

    def as_dict(self) -> dict[str, Any]:
        results = Counter(o.result for o in self.outcomes)
        return {
            "sweep_id": self.sweep_id,
            "candidates": self.candidates,
            "probed": sum(1 for o in self.outcomes if o.result != "pending"),
            "failed": dict(Counter(o.error_code for o in self.outcomes if o.result == "failed")),
            "would_fail": dict(
                Counter(o.error_code for o in self.outcomes if o.result == "would_fail")
            ),
            "held": results["held"],
            "brake": self.brake,
            "healthy": results["healthy"],
            "unchanged": results["unchanged"],
            "probe_errors": dict(
                Counter(o.probe_error for o in self.outcomes if o.result == "probe_error")
            ),
            "pending": results["pending"],
            "skipped": self.skipped,
            "elapsed_s": round(self.elapsed_s, 3),
            "audits": [o.as_dict() for o in self.outcomes],
            "candidate_audits": [
                {
                    "audit_id": r.audit_id,
                    "workflow_instance_id": r.state.workflow_instance_id,
                    "started_at": r.state.started_at.isoformat() if r.state.started_at else None,
                    "last_observed_status": r.state.last_observed_status,
                    "last_observed_at": (
                        r.state.last_observed_at.isoformat() if r.state.last_observed_at else None
                    ),
                }
                for r in self.candidate_rows
            ],
        }


async def await_outcomes(
    store: ProjectionStore,
    requests: list[ProbeRequested],
    policy: Policy,
    timeout: float,
    watch: Callable[[int, int], Awaitable[None]] | None = None,
) -> list[Outcome]:
    """One outcome per request, in request order; ``pending`` for what did not arrive in time.
    ``watch(done, total)`` is awaited about once a second while it waits: to show progress,
    or to raise (the server it waits on went away)."""
    outcomes = {
        str(r.event_id): Outcome(audit_id=r.audit_id, request_id=str(r.event_id)) for r in requests
    }
    waiting_obs = set(outcomes)
    waiting_decision: dict[str, Outcome] = {}  # observation id -> outcome
    deadline = time.monotonic() + timeout
    watched = time.monotonic()
    while True:
        if watch is not None and time.monotonic() - watched >= 1.0:
            watched = time.monotonic()
            await watch(len(requests) - len(waiting_obs) - len(waiting_decision), len(requests))
        if waiting_obs:
            for obs in await store.audits.caused_by(waiting_obs):
                key = str(obs.causation_id)
                if key not in waiting_obs:
                    continue
                waiting_obs.discard(key)
                outcome = outcomes[key]
                if obs.type == "WorkflowProbeFailed":
                    outcome.result = "probe_error"
                    outcome.probe_error = obs.data.reason.value
                    outcome.reason = obs.data.detail
                    continue
                outcome.observed_status = status = obs.data.status  # type: ignore[union-attr]
                if status in HEALTHY_STATUSES:
                    # Healthy statuses never fail an audit; only the instance check needs state.
                    row = await store.audits.get(obs.audit_id)
                    before = row.state if row is not None else None
                else:
                    before = await state_before(store.audits, obs)
                verdict = judge(before, obs, policy)
                outcome.rule = verdict.rule if verdict else None
                outcome.reason = verdict.reason if verdict else None
                if verdict is not None and verdict.failure is not None:
                    outcome.error_code = verdict.failure.error_code
                    if _already_held(before, verdict.failure.error_code):
                        outcome.result = "held"  # the reconciler records no second decision
                        continue
                    waiting_decision[str(obs.event_id)] = outcome
                else:
                    outcome.result = (
                        "healthy" if verdict and verdict.rule == "healthy" else "unchanged"
                    )
        if waiting_decision:
            for decision in await store.audits.caused_by(list(waiting_decision)):
                key = str(decision.causation_id)
                if decision.type == "AuditFailureHeld" and key in waiting_decision:
                    waiting_decision[key].result = "held"  # unless released: waited for below
                    continue
                if decision.type not in _DECISIONS:
                    continue
                decided = waiting_decision.pop(key, None)
                if decided is not None:
                    outcome = decided
                    outcome.result = "failed" if decision.type == "AuditFailed" else "would_fail"
                    outcome.error_code = decision.data.error_code  # type: ignore[union-attr]
            held = [k for k, o in waiting_decision.items() if o.result == "held"]
            if held and (await store.brake.state()).engaged:
                for key in held:  # the brake holds them until an operator acts
                    waiting_decision.pop(key)
        for obs_id, outcome in list(waiting_decision.items()):
            # Another observation of the same audit may have been decided first: the audit
            # is then already terminal and this one is (rightly) not decided again.
            row = await store.audits.get(outcome.audit_id)
            if row is not None and row.status != RUNNING and row.version > 0:
                history = [e.event for e in await store.audits.history(outcome.audit_id)]
                ids = [str(e.event_id) for e in history]
                if obs_id in ids and any(
                    e.type in _DECISIONS for e in history[ids.index(obs_id) + 1 :]
                ):
                    waiting_decision.pop(obs_id)
                    outcome.result = "failed" if row.status == FAILED else "unchanged"
                    outcome.error_code = row.state.error_code
        if (not waiting_obs and not waiting_decision) or time.monotonic() >= deadline:
            break
        # Look again when the projection changes (a notification, or the store's cheap check
        # for a commit); at least every quarter second for the brake and ``watch``.
        await store.audits.changed(min(max(deadline - time.monotonic(), 0.0), 0.25))
    return [outcomes[str(r.event_id)] for r in requests]


def _already_held(before: AuditState | None, error_code: str) -> bool:
    """Whether the audit already has a decision held, so the reconciler appends no second
    one for this observation (:func:`statemachine.rules.decide`): its outcome is ``held``."""
    return (
        before is not None
        and before.held_decision_id is not None
        and error_code in HELD_ERROR_CODES
    )
