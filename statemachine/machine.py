"""The audit lifecycle as data: states, the transition table, its conditions, and its diagram.

The table is the single source of truth, written as ``transitions`` definitions (``trigger``,
``source``, ``dest``, named ``conditions``) plus a ``note`` for replay. It is loaded once, at
import, into a ``transitions`` ``Machine(model=None, auto_transitions=False)``, checked (unknown
states, triggers or conditions, ambiguous rows, a terminal state left without a condition are
import errors), and the lookup index is read from the machine's own events. Live audits never
get a Machine attached: :func:`next_status` evaluates a row's conditions on the audit itself.
The same table renders the diagram through the library's mermaid support (:func:`mermaid`).

``source`` :data:`INITIAL` means "no audit yet". A trigger with no row for the current state is
*recorded, not applied*: the event lands in history, the state is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NotRequired, Protocol, TypedDict

from transitions import Machine, Transition

from statemachine.events import LIFECYCLE_TYPES

__all__ = [
    "COMPLETED",
    "CONDITIONS",
    "FAILED",
    "INITIAL",
    "RUNNING",
    "STATES",
    "TERMINAL",
    "TRANSITIONS",
    "TRIGGERS",
    "Row",
    "TableRow",
    "mermaid",
    "next_status",
    "still_changes",
]

INITIAL: Final = "none"
RUNNING: Final = "running"
COMPLETED: Final = "completed"
FAILED: Final = "failed"
STATES: Final = (INITIAL, RUNNING, COMPLETED, FAILED)
TERMINAL: Final = frozenset({COMPLETED, FAILED})
# Every lifecycle event type is a trigger (the table says which of them move which state).
TRIGGERS: Final = tuple(LIFECYCLE_TYPES)


class Facts(Protocol):
    """What a condition may look at: the audit as it is before the event."""

    @property
    def failed_by(self) -> str | None: ...


# Conditions are named predicates on the audit, referred to by name in the table.
CONDITIONS: Final[Mapping[str, Callable[[Facts], bool]]] = {
    "failed_by_reconciler": lambda audit: audit.failed_by == "reconciler",
    # A failure auditrec made (a decision, an operator's): never one the workflow reported.
    "failed_by_reconciler_or_operator": lambda audit: audit.failed_by in ("reconciler", "operator"),
}


class TableRow(TypedDict):
    trigger: str
    source: str
    dest: str
    conditions: NotRequired[list[str]]
    note: str


TRANSITIONS: Final[tuple[TableRow, ...]] = (
    {"trigger": "AuditStarted", "source": INITIAL, "dest": "running", "note": "audit starts"},
    {
        "trigger": "WorkflowInstanceAttached",
        "source": "running",
        "dest": "running",
        "note": "instance id recorded",
    },
    {
        "trigger": "AuditProgressed",
        "source": "running",
        "dest": "running",
        "note": "phase and counters updated",
    },
    {
        "trigger": "AuditCompleted",
        "source": "running",
        "dest": "completed",
        "note": "audit completed",
    },
    {"trigger": "AuditFailed", "source": "running", "dest": "failed", "note": "audit failed"},
    {
        "trigger": "AuditCompleted",
        "source": "failed",
        "dest": "completed",
        "conditions": ["failed_by_reconciler"],
        "note": "the workflow finished after all: the reconciler's failure is overturned",
    },
    {
        "trigger": "AuditRestored",
        "source": "failed",
        "dest": "running",
        "conditions": ["failed_by_reconciler_or_operator"],
        "note": "an operator undid the failure: the audit runs again",
    },
    {
        "trigger": "WorkflowStatusObserved",
        "source": "running",
        "dest": "running",
        "note": "observation; the rules decide",
    },
    {
        "trigger": "WorkflowProbeFailed",
        "source": "running",
        "dest": "running",
        "note": "probe failed; no change",
    },
    {
        "trigger": "AuditFailureSimulated",
        "source": "running",
        "dest": "running",
        "note": "shadow decision; history only",
    },
    {
        "trigger": "AuditFailureHeld",
        "source": "running",
        "dest": "running",
        "note": "decision held by the mass-failure brake; status unchanged",
    },
    {
        "trigger": "AuditFailureReleased",
        "source": "running",
        "dest": "running",
        "note": "held decision released; the reconciler appends the failure it held",
    },
    {
        "trigger": "AuditFailureDiscarded",
        "source": "running",
        "dest": "running",
        "note": "held decision discarded; the audit keeps running",
    },
    {
        "trigger": "WorkflowTerminationRequested",
        "source": "running",
        "dest": "running",
        "note": "stalled: the instance is to be terminated; fails once that is observed",
    },
)


class Row(Transition):
    """A row of the table as the machine holds it, with its trigger and note."""

    trigger: str = ""
    dest: str  # every row of the table has one

    def __init__(self, *args: Any, note: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.note = note

    @property
    def condition_names(self) -> tuple[str, ...]:
        return tuple(str(c.func) for c in self.conditions)

    @property
    def guard(self) -> str | None:
        """The row's condition, if any (the table has at most one per row)."""
        names = self.condition_names
        return names[0] if names else None

    def allows(self, audit: Facts | None) -> bool:
        return all(
            audit is not None and CONDITIONS[str(c.func)](audit) is c.target
            for c in self.conditions
        )


class _TableMachine(Machine):
    transition_cls = Row


def _check(rows: Sequence[TableRow]) -> None:
    for row in rows:
        if row["trigger"] not in TRIGGERS:
            raise ValueError(f"unknown trigger in transition table: {row['trigger']}")
        if row["source"] not in STATES or row["dest"] not in STATES:
            raise ValueError(f"unknown state in transition table: {row}")
        unknown = set(row.get("conditions", [])) - set(CONDITIONS)
        if unknown:
            raise ValueError(f"unknown condition in transition table: {sorted(unknown)}")


def _validate() -> dict[tuple[str, str], tuple[Row, ...]]:
    """Load the table into a machine, check it, and index its rows by (source, trigger)."""
    _check(TRANSITIONS)
    machine = _TableMachine(
        model=None,
        states=list(STATES),
        initial=INITIAL,
        transitions=[dict(row) for row in TRANSITIONS],
        auto_transitions=False,
        send_event=False,
    )
    index: dict[tuple[str, str], tuple[Row, ...]] = {}
    for trigger, event in machine.events.items():
        for source, held in event.transitions.items():
            rows = tuple(row for row in held if isinstance(row, Row))
            for row in rows:
                row.trigger = trigger
            index[(source, trigger)] = rows
    for (source, trigger), rows in index.items():
        unconditioned = [r for r in rows if not r.conditions]
        if len(unconditioned) > 1 or (unconditioned and rows[-1] is not unconditioned[0]):
            raise ValueError(f"ambiguous transitions for {trigger} from {source}")
        if source in TERMINAL and not all(r.conditions for r in rows):
            raise ValueError(f"a terminal state may only be left under a condition: {rows}")
    missing = set(TRIGGERS) - set(machine.events)
    if missing:
        raise ValueError(f"triggers without a transition: {sorted(missing)}")
    return index


_INDEX: Final = _validate()


def next_status(status: str, trigger: str, audit: Facts | None = None) -> Row | None:
    """The row that ``trigger`` takes from ``status`` for ``audit`` (whose facts the row's
    conditions read), or ``None``: recorded, not applied."""
    for row in _INDEX.get((status, trigger), ()):
        if not row.conditions or row.allows(audit):
            return row
    return None


def still_changes(status: str, audit: Facts | None = None) -> bool:
    """Whether some event can still move an audit in ``status`` (``audit`` its facts): a row of
    the table leaves ``status`` under conditions ``audit`` meets. A terminal state for which
    none does is final (a completion; a failure the workflow reported)."""
    return any(
        not row.conditions or row.allows(audit)
        for (source, _), rows in _INDEX.items()
        if source == status
        for row in rows
    )


class _Marked:
    state: str


def mermaid(current: str | None = None) -> str:
    """The state diagram of the table as mermaid ``stateDiagram-v2``, drawn by ``transitions``'
    mermaid support; ``current`` marks a state (an audit's) as active."""
    from transitions.extensions import GraphMachine

    model = _Marked()
    GraphMachine(
        model=model,
        states=list(STATES),
        initial=current or INITIAL,
        transitions=[{k: v for k, v in row.items() if k != "note"} for row in TRANSITIONS],
        auto_transitions=False,
        graph_engine="mermaid",
        show_conditions=True,
        title="audit lifecycle",
    )
    text: str = model.get_graph().draw(None)  # type: ignore[attr-defined]
    if current is None:  # the machine needs a state; without an audit, none is active
        text = text.replace(f"Class {INITIAL} s_active", f"Class {INITIAL} s_default")
    return text.rstrip("\n") + "\n"
