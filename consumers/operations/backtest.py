"""Backtesting a policy over recorded history (``auditrec backtest``, ``GET /backtest``): the
audits that would have ended differently had other thresholds been in force.

The judging is the core's (:mod:`statemachine.backtest`); this reads each observed audit's
history from the projection store (``audit_events``) and writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from projections.audits import AuditReads
from statemachine.backtest import SETTINGS, Difference, backtest_audit, policy_with, summarise
from statemachine.errors import InvalidInput
from statemachine.policy import Policy, format_duration, parse_duration

__all__ = ["AUDITS_A_READ", "backtest", "describe", "parse_since"]

AUDITS_A_READ = 500  # histories read at once (the memory a backtest holds beyond its answer)


def parse_since(text: str | None, now: datetime) -> datetime | None:
    """An ISO 8601 time (with its zone; a date alone is midnight UTC), or a duration back
    from ``now`` (``24h``)."""
    if text is None or not text.strip():
        return None
    value = text.strip()
    try:
        return now - parse_duration(value)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(
            f"invalid since {text!r}: an ISO 8601 time (2026-11-30T08:00:00Z) or a duration "
            "back from now (24h, at most 100 years)"
        ) from None
    if when.tzinfo is None:
        if len(value) > 10:  # a time without a zone is ambiguous; a date alone is not
            raise InvalidInput(f"invalid since {text!r}: give the time zone (e.g. Z)")
        when = when.replace(tzinfo=UTC)
    return when


def _changed(base: Policy, tested: Policy) -> dict[str, dict[str, Any]]:
    before, after = base.evidence(), tested.evidence()
    return {k: {"from": before[k], "to": after[k]} for k in before if before[k] != after[k]}


def _notes(assignments: Sequence[str]) -> list[str]:
    names = {a.partition("=")[0].strip().upper().removeprefix("AUDITREC_") for a in assignments}
    return [f"{n}: {SETTINGS[n]}" for n in sorted(names) if SETTINGS[n].startswith("not ")]


async def backtest(
    audits: AuditReads,
    base: Policy,
    assignments: Sequence[str],
    *,
    since: datetime | None = None,
) -> dict[str, Any]:
    """Every observed audit (started at or after ``since``, when given) judged again under
    ``base`` with ``assignments`` (``NAME=VALUE``) applied: those that would have ended
    differently, and a count per rule and kind."""
    tested = policy_with(base, assignments)
    ids = [
        row.audit_id
        async for row in audits.iter_rows()
        if row.state.last_observed_at is not None
        and (since is None or (row.state.started_at is not None and row.state.started_at >= since))
    ]
    differences: list[Difference] = []
    for start in range(0, len(ids), AUDITS_A_READ):
        histories = await audits.histories(ids[start : start + AUDITS_A_READ])
        for audit_id, entries in histories.items():
            recorded_at = {
                entry.event.event_id: entry.recorded_at
                for entry in entries
                if entry.recorded_at is not None
            }
            found = backtest_audit(
                audit_id, [entry.event for entry in entries], tested, recorded_at
            )
            if found is not None:
                differences.append(found)
    differences.sort(key=lambda d: (d.kind, d.audit_id))
    return {
        "policy": tested.evidence(),
        "changed": _changed(base, tested),
        "notes": _notes(assignments),
        "since": since.isoformat() if since is not None else None,
        "audits_judged": len(ids),
        "differences": [d.as_dict() for d in differences],
        "summary": summarise(differences),
    }


def describe(difference: dict[str, Any]) -> str:
    """One line for a difference, as the CLI prints it."""
    a, t = difference["actual"], difference["tested"]
    kind = difference["kind"]
    if kind in ("failed_earlier", "failed_later"):
        delta = format_duration(timedelta(seconds=abs(difference["delta_s"] or 0)))
        word = "earlier" if kind == "failed_earlier" else "later"
        return f"would fail {t['error_code']} {delta} {word} (at {t['failed_at']})"
    if kind == "not_failed":
        return f"would not fail (failed {a['error_code']} at {a['failed_at']}); ends {t['status']}"
    if kind == "failed":
        return f"would fail {t['error_code']} at {t['failed_at']} (ended {a['status']})"
    return f"would fail {t['error_code']} instead of {a['error_code']} (at {t['failed_at']})"
