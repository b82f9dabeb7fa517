"""The mass-failure brake as the CLI and the HTTP API report and end it (``auditrec brake``,
``/brake``): JSON-ready data over :class:`~consumers.components.brake.Brake`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from consumers.components.brake import Brake
from consumers.runtime.metrics import BRAKE_ENGAGED, DECISIONS_HELD
from projections.row import AuditRow

__all__ = ["brake_status", "end_brake"]


async def brake_status(brake: Brake, limit: int = 100) -> dict[str, Any]:
    """The brake and the decisions it holds (at most ``limit`` listed)."""
    state, holds = await brake.status()
    BRAKE_ENGAGED.set(1 if state.engaged else 0)
    DECISIONS_HELD.set(len(holds))
    last = None
    if state.how is not None:
        last = {"how": state.how, "by": state.ended_by, "at": _iso(state.ended_at)}
    return {
        "engaged": state.engaged,
        "since": _iso(state.since),
        "sweep_id": state.sweep_id if state.engaged else None,
        "lost": state.lost if state.engaged else None,
        "observations": state.observations if state.engaged else None,
        "thresholds": {
            "min_audits": brake.policy.brake_min_audits,
            "min_share": brake.policy.brake_min_share,
        },
        "last_ended": last,
        "held": len(holds),
        "holds": [_hold(r) for r in holds[:limit]],
    }


async def end_brake(
    brake: Brake, how: str, actor: str, reason: str | None, *, dry_run: bool = False
) -> dict[str, Any]:
    """Release (the held failures take effect) or discard (the audits keep running) every
    held decision, and disengage the brake; ``dry_run`` lists what it would touch."""
    ended = await brake.end(how, actor, reason, dry_run=dry_run)
    return {
        "action": how,
        "dry_run": dry_run,
        "was_engaged": ended.was_engaged,
        "holds": len(ended.holds),
        "audits": [_hold(r) for r in ended.holds],
    }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def _hold(row: AuditRow) -> dict[str, Any]:
    s = row.state
    return {
        "audit_id": s.audit_id,
        "held_decision_id": s.held_decision_id,
        "held_at": _iso(s.held_at),
        "workflow_instance_id": s.workflow_instance_id,
        "project_id": s.project_id,
        "started_at": _iso(s.started_at),
    }
