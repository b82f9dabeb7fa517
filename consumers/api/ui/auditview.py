"""What one audit's console page shows, readable at a glance: the failure (or the held decision)
summed up at the top, the row as labelled fields, and the timeline with its repeated
observations that change nothing — and those the mass-failure brake holds — each collapsed
into one line ("healthy, 14 observations 01:05–02:10").

The steps come from :func:`statemachine.explain.explain`, unchanged (``auditrec replay`` and
``GET /audits/{id}/events`` show every one): only their presentation is decided here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from projections.row import COLUMNS, AuditRow
from statemachine.explain import Step
from statemachine.policy import format_duration

__all__ = [
    "LABELS",
    "STALL_EVIDENCE",
    "Field",
    "Group",
    "failure_summary",
    "fields",
    "hold_summary",
    "stall_summary",
    "timeline",
]

# Each column of the row (DESIGN §6) as the page names it.
LABELS: dict[str, str] = {
    "audit_id": "Audit",
    "project_id": "Project",
    "organization_id": "Organization",
    "started_by_user_id": "Started by (user)",
    "start_url": "Start URL",
    "workflow_instance_id": "Workflow instance",
    "status": "Status",
    "current_phase": "Current phase",
    "pages_crawled": "Pages crawled",
    "pages_total": "Pages in total",
    "started_at": "Started at",
    "completed_at": "Completed at",
    "failed_at": "Failed at",
    "error_code": "Error code",
    "error_detail": "Error detail",
    "failed_phase": "Failed in phase",
    "failed_by": "Failed by",
    "reconciled_by": "Found by",
    "last_observed_status": "Last observed status",
    "last_observed_at": "Last observed at",
    "overturned": "Overturned",
    "held_decision_id": "Held decision",
    "held_at": "Held since",
    "workflow": "Workflow",
    "stalled_at": "Stalled since",
    "version": "Events applied",
    "last_event_id": "Last event",
    "updated_at": "Row updated at",
}
# The evidence a stall verdict records (its policy's), as the page names it.
STALL_EVIDENCE: dict[str, str] = {
    "progress_recorded_at": "Last progress recorded at",
    "step": "Step",
    "step_attempts": "Step attempts",
    "step_retrying": "Step retrying",
    "stalled_after_s": "Stalled after",
    "observed_at": "Instance read at",
}
# What the steps that collapse are: observations and probe failures.
_OBSERVATIONS = frozenset({"WorkflowStatusObserved", "WorkflowProbeFailed"})


@dataclass(frozen=True, slots=True)
class Field:
    """One column of the row: its name, its label, its value (``None`` when unset; a
    ``datetime`` for the page to show as a timestamp) and its text otherwise."""

    column: str
    label: str
    value: Any
    text: str

    @property
    def is_time(self) -> bool:
        return isinstance(self.value, datetime)


def _text(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value.replace("_", " ") if value.isidentifier() and value.islower() else value
    return str(value)


def fields(row: AuditRow, default_workflow: str | None = None) -> list[Field]:
    """The row's shown columns (DESIGN §6), labelled, with readable values: ``yes``/``no``
    for flags, words for the vocabulary's snake_case values, ``—`` for none; an audit that
    names no workflow runs in ``default_workflow`` (``AUDITREC_CLOUDFLARE_WORKFLOW``)."""
    values = row.values()
    out = []
    for column in COLUMNS:
        value = values[column]
        if column == "workflow" and value is None:
            value = default_workflow
        if column == "workflow" and value is not None:  # a name: exact
            out.append(Field(column, LABELS[column], value, str(value)))
            continue
        # ids and codes stay exact: they are searched for and copied
        exact = column.endswith("_id") or column in ("error_code", "start_url", "error_detail")
        text = str(value) if exact and value is not None else _text(value)
        out.append(Field(column, LABELS.get(column, column), value, text))
    return out


def failure_summary(row: AuditRow, steps: Sequence[Step]) -> dict[str, Any] | None:
    """A failed audit's failure: its code, the reason given, the rule that fired, who failed
    it and when; ``None`` unless the audit is failed."""
    state = row.state
    if state.status != "failed":
        return None
    failure = next(
        (s for s in reversed(steps) if s.event.type == "AuditFailed" and s.after == "failed"),
        None,
    )
    who = state.failed_by or "-"
    rule = None
    if failure is not None:
        data = failure.event.data
        rule = failure.rule
        actor = getattr(data, "actor", None)
        behalf = getattr(data, "on_behalf_of", None)
        if actor:
            who += f" {actor}" + (f" on behalf of {behalf}" if behalf else "")
    if state.reconciled_by:
        who += f" (found by the {state.reconciled_by.replace('_', '-')})"
    return {
        "code": state.error_code,
        "detail": state.error_detail,
        "rule": rule,
        "who": who,
        "at": state.failed_at,
        "phase": state.failed_phase,
        "reason": failure.reason if failure is not None else None,
    }


def hold_summary(row: AuditRow, steps: Sequence[Step]) -> dict[str, Any] | None:
    """A decision the mass-failure brake holds on a running audit: the failure it would be,
    since when and why it is held; ``None`` when nothing is held."""
    state = row.state
    if state.held_decision_id is None:
        return None
    hold = next((s for s in steps if str(s.event.event_id) == state.held_decision_id), None)
    data = hold.event.data if hold is not None else None
    decision = getattr(data, "decision", None)
    return {
        "code": getattr(decision, "error_code", None),
        "detail": getattr(decision, "error_detail", None),
        "rule": getattr(decision, "rule", None),
        "why": getattr(data, "reason", None),
        "at": state.held_at,
    }


def stall_summary(row: AuditRow, steps: Sequence[Step]) -> dict[str, Any] | None:
    """A running audit's stall verdict: since when, what it says (the latest
    ``AuditFailureSimulated`` or ``WorkflowTerminationRequested`` of rule ``stalled``) and its
    evidence (the last progress, the instance's step); ``None`` unless the audit is stalled."""
    state = row.state
    if state.stalled_at is None or state.status != "running":
        return None
    decision: Any = None
    terminating = False
    for step in reversed(steps):
        data: Any = step.event.data
        if step.event.type == "WorkflowTerminationRequested":
            data, terminating = getattr(data, "decision", None), True
        elif step.event.type != "AuditFailureSimulated":
            continue
        if getattr(data, "rule", None) == "stalled":
            decision = data
            break
        terminating = False
    policy = dict(getattr(decision, "policy", None) or {})
    evidence = [
        (key, label, _evidence(key, policy[key]))
        for key, label in STALL_EVIDENCE.items()
        if policy.get(key) is not None
    ]
    return {
        "at": state.stalled_at,
        "detail": getattr(decision, "error_detail", None),
        "evidence": evidence,
        "terminating": terminating or state.termination_requested_at is not None,
        "termination_requested_at": state.termination_requested_at,
    }


def _evidence(key: str, value: Any) -> Any:
    """A stall's evidence as the page shows it: times as times (the page formats them), a
    duration in seconds as a duration, flags as yes or no."""
    if key.endswith("_at") and isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return value
    if key.endswith("_s") and isinstance(value, int | float) and not isinstance(value, bool):
        return format_duration(timedelta(seconds=value))
    return _text(value) if isinstance(value, bool) else value


@dataclass(slots=True)
class Group:
    """Consecutive observations alike, shown as one line: ``kind`` is ``quiet`` (they change
    nothing) or ``held`` (judged a failure the brake holds: no second decision)."""

    kind: str
    rule: str
    steps: list[tuple[int, Step]] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.steps)

    @property
    def first(self) -> datetime:
        return self.steps[0][1].event.occurred_at

    @property
    def last(self) -> datetime:
        return self.steps[-1][1].event.occurred_at

    @property
    def span(self) -> str:
        """``01:05–02:10`` (UTC) within a day; the dates too across days."""
        first, last = (t.astimezone(UTC) for t in (self.first, self.last))
        if first.date() == last.date():
            return f"{first:%H:%M}–{last:%H:%M}"
        return f"{first:%Y-%m-%d %H:%M}–{last:%Y-%m-%d %H:%M}"

    @property
    def label(self) -> str:
        """``healthy``, ``probe failed, no change``, ``instance lost while held, no second
        decision``."""
        rule = self.rule.replace("_", " ")
        if self.kind == "held":  # shown after a "held" mark
            return f"{rule} while held, no second decision"
        return rule if self.rule == "healthy" else f"{rule}, no change"


def _kind(step: Step) -> str | None:
    """How ``step`` collapses with its like, if it does."""
    if step.event.type not in _OBSERVATIONS or step.before != step.after:
        return None
    if step.held:
        # the observation that made a hold is followed by the hold: only the later ones
        return "held" if step.reason.endswith("no second decision") else None
    return "quiet" if step.no_change else None


def timeline(steps: Sequence[Step], least: int = 2) -> list[tuple[int, Step] | Group]:
    """The steps in order (each with its number, from 1), runs of at least ``least``
    consecutive observations of the same kind and rule as one :class:`Group` each."""
    out: list[tuple[int, Step] | Group] = []
    run: Group | None = None

    def close() -> None:
        if run is None:
            return
        if run.count >= least:
            out.append(run)
        else:
            out.extend(run.steps)

    for number, step in enumerate(steps, 1):
        kind = _kind(step)
        if run is not None and kind == run.kind and step.rule == run.rule:
            run.steps.append((number, step))
            continue
        close()
        run = None
        if kind is None:
            out.append((number, step))
        else:
            run = Group(kind, step.rule, [(number, step)])
    close()
    return out
