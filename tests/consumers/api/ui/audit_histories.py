"""Histories of single audits for the audit page's tests: a long healthy stretch, a decision the
mass-failure brake holds (and the sweeps that find the instance gone again meanwhile), and a
reconciler's failure."""

from __future__ import annotations

from datetime import datetime, timedelta

from statemachine.events import AuditEvent, AuditFailureHeld
from statemachine.policy import Policy
from statemachine.rules import decide
from statemachine.state import fold
from tests.contracts.projection_store import failed, observed, started

HEALTHY = 14  # healthy observations in a row, five minutes apart
AGAIN = 3  # observations of the gone instance while its decision is held
STEP = timedelta(minutes=5)
# A watchdog sweep large enough to trip the brake (at 20 by default; 3 in the browser tests'
# serve): its instance_lost decisions are held until the sweep's verdict, which a sweep no
# store knows never gets, so a reconciler that folds these events holds them too.
SWEEP = {"sweep_id": "sweep-large", "sweep_size": 50}


def healthy_then_held(audit_id: str, start: datetime, instance: str) -> list[AuditEvent]:
    """Started at ``start``, observed running :data:`HEALTHY` times, then found gone by a
    large sweep (the decision held), then found gone :data:`AGAIN` times more (no second
    decision)."""
    events: list[AuditEvent] = [started(audit_id, start, instance=instance)]
    when = start
    for _ in range(HEALTHY):
        when += STEP
        events.append(observed(audit_id, "running", when, instance=instance))
    when += timedelta(hours=1)  # past the instance-lost grace
    gone = observed(audit_id, "not_found", when, instance=instance, **SWEEP)
    state = fold(events)
    _, hold = decide(state, gone, Policy())
    assert isinstance(hold, AuditFailureHeld)
    events += [gone, hold]
    for _ in range(AGAIN):
        when += STEP
        events.append(observed(audit_id, "not_found", when, instance=instance, **SWEEP))
    return events


def failed_by_the_watchdog(audit_id: str, start: datetime, instance: str) -> list[AuditEvent]:
    """Started, observed running twice, then failed ``instance_lost`` by the reconciler."""
    return [
        started(audit_id, start, instance=instance),
        observed(audit_id, "running", start + STEP, instance=instance),
        observed(audit_id, "running", start + 2 * STEP, instance=instance),
        failed(
            audit_id,
            start + timedelta(hours=1),
            by="reconciler",
            code="instance_lost",
            reconciled_by="watchdog",
            rule="instance_lost",
            failed_phase="crawl",
        ),
    ]
