"""The audit lifecycle as data: states, the transition table, and its validation.

The table is the single source of truth. It is validated once at import by a ``transitions``
``Machine(model=None, auto_transitions=False)``: an unknown state or trigger is an import
error. Live audits never get a Machine attached; :func:`next_status` looks the table up
directly, and :func:`mermaid` renders the same table.

Rows are ``(trigger, source, dest, guard, note)``. ``source`` ``None`` means "no audit yet".
Guards are named predicates on the audit (only ``failed_by_reconciler`` exists). A trigger with
no row for the current state is *recorded, not applied*: the event lands in history, the state
is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from transitions import Machine

__all__ = [
    "INITIAL",
    "STATES",
    "TERMINAL",
    "TRANSITIONS",
    "Transition",
    "mermaid",
    "next_status",
]

INITIAL: Final = "none"
STATES: Final = (INITIAL, "running", "completed", "failed")
TERMINAL: Final = frozenset({"completed", "failed"})
TRIGGERS: Final = (
    "AuditStarted",
    "WorkflowInstanceAttached",
    "AuditProgressed",
    "AuditCompleted",
    "AuditFailed",
    "AuditFailureSimulated",
    "WorkflowStatusObserved",
    "WorkflowProbeFailed",
)


@dataclass(frozen=True, slots=True)
class Transition:
    trigger: str
    source: str
    dest: str
    guard: str | None
    note: str


TRANSITIONS: Final[tuple[Transition, ...]] = (
    Transition("AuditStarted", INITIAL, "running", None, "audit starts"),
    Transition("WorkflowInstanceAttached", "running", "running", None, "instance id recorded"),
    Transition("AuditProgressed", "running", "running", None, "phase and counters updated"),
    Transition("AuditCompleted", "running", "completed", None, "audit completed"),
    Transition("AuditFailed", "running", "failed", None, "audit failed"),
    Transition(
        "AuditCompleted",
        "failed",
        "completed",
        "failed_by_reconciler",
        "the workflow finished after all: the reconciler's failure is overturned",
    ),
    Transition(
        "WorkflowStatusObserved", "running", "running", None, "observation; the rules decide"
    ),
    Transition("WorkflowProbeFailed", "running", "running", None, "probe failed; no change"),
    Transition(
        "AuditFailureSimulated", "running", "running", None, "shadow decision; history only"
    ),
)

GUARDS: Final = frozenset({"failed_by_reconciler"})


def _validate() -> dict[tuple[str, str], tuple[Transition, ...]]:
    machine = Machine(
        model=None,
        states=list(STATES),
        initial=INITIAL,
        auto_transitions=False,
        send_event=False,
    )
    index: dict[tuple[str, str], list[Transition]] = {}
    for row in TRANSITIONS:
        if row.trigger not in TRIGGERS:
            raise ValueError(f"unknown trigger in transition table: {row.trigger}")
        if row.guard is not None and row.guard not in GUARDS:
            raise ValueError(f"unknown guard in transition table: {row.guard}")
        # add_transition raises for unknown states.
        if row.source not in STATES or row.dest not in STATES:
            raise ValueError(f"unknown state in transition table: {row}")
        machine.add_transition(row.trigger, row.source, row.dest)
        index.setdefault((row.source, row.trigger), []).append(row)
    for (source, trigger), rows in index.items():
        unguarded = [r for r in rows if r.guard is None]
        if len(unguarded) > 1 or (unguarded and rows[-1] is not unguarded[0]):
            raise ValueError(f"ambiguous transitions for {trigger} from {source}")
        if source in TERMINAL and not all(r.guard for r in rows):
            raise ValueError(f"a terminal state may only be left under a guard: {rows}")
    missing = set(TRIGGERS) - set(machine.events)
    if missing:
        raise ValueError(f"triggers without a transition: {sorted(missing)}")
    return {key: tuple(rows) for key, rows in index.items()}


_INDEX: Final = _validate()


def next_status(status: str, trigger: str, failed_by: str | None = None) -> Transition | None:
    """The transition that ``trigger`` takes from ``status``, or ``None``: recorded, not applied."""
    for row in _INDEX.get((status, trigger), ()):
        if row.guard is None or (row.guard == "failed_by_reconciler" and failed_by == "reconciler"):
            return row
    return None


def mermaid() -> str:
    """The state diagram of the table, as mermaid ``stateDiagram-v2``."""
    lines = ["stateDiagram-v2"]
    for row in TRANSITIONS:
        source = "[*]" if row.source == INITIAL else row.source
        label = row.trigger + (f" [{row.guard}]" if row.guard else "")
        lines.append(f"    {source} --> {row.dest}: {label}")
    for state in sorted(TERMINAL):
        lines.append(f"    {state} --> [*]")
    return "\n".join(lines) + "\n"
