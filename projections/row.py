"""The audit row (DESIGN §6) and the pure projection ``project(row, event) -> row``.

A row is the audit's :class:`~statemachine.state.AuditState` plus bookkeeping: ``version``
(events applied by the transition table), ``last_event_id`` and
``updated_at`` (set by the store when
it writes). ``project`` is ``evolve`` plus that bookkeeping, so the table is exactly the fold of
the log.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from types import NoneType
from typing import Any, Final, Literal, get_args, get_type_hints

from statemachine.events import AuditEvent
from statemachine.machine import next_status
from statemachine.state import AuditState, evolve, initial

__all__ = [
    "COLUMNS",
    "COLUMN_KINDS",
    "INTERNAL_COLUMNS",
    "STATE_FIELDS",
    "STORED_COLUMNS",
    "TIMESTAMPS",
    "AuditRow",
    "ColumnKind",
    "RowFold",
    "project",
    "row_dict",
]

ColumnKind = Literal["text", "integer", "timestamp", "boolean", "uuid"]
_KIND_OF_TYPE: Final[dict[type, ColumnKind]] = {
    str: "text",
    int: "integer",
    datetime: "timestamp",
    bool: "boolean",
}


def _kind(annotation: Any) -> ColumnKind:
    """``str | None`` → ``text``, and so on."""
    kinds = {_KIND_OF_TYPE[t] for t in get_args(annotation) or (annotation,) if t is not NoneType}
    assert len(kinds) == 1, f"no single column kind for {annotation!r}"
    return kinds.pop()


STATE_FIELDS: Final[tuple[str, ...]] = AuditState._fields
# Every stored column and its kind: the state's fields, then the projection's bookkeeping.
# The stores map kinds to their own types; DESIGN §6 lists them all but the internal ones.
COLUMN_KINDS: Final[dict[str, ColumnKind]] = {
    **{name: _kind(hint) for name, hint in get_type_hints(AuditState).items()},
    "version": "integer",
    "last_event_id": "uuid",
    "updated_at": "timestamp",
}
STORED_COLUMNS: Final[tuple[str, ...]] = tuple(COLUMN_KINDS)
# Stored for the rules (rule 6, stalls), never shown.
INTERNAL_COLUMNS: Final = frozenset(
    {"instance_ended_at", "progress_event_id", "termination_requested_at", "held_rule"}
)
COLUMNS: Final[tuple[str, ...]] = tuple(c for c in STORED_COLUMNS if c not in INTERNAL_COLUMNS)
TIMESTAMPS: Final = frozenset(c for c, kind in COLUMN_KINDS.items() if kind == "timestamp")


@dataclass(frozen=True, slots=True)
class AuditRow:
    state: AuditState
    version: int = 0
    last_event_id: uuid.UUID | None = None
    updated_at: datetime | None = None

    @property
    def audit_id(self) -> str:
        return self.state.audit_id

    @property
    def status(self) -> str:
        return self.state.status

    def values(self) -> dict[str, Any]:
        """Every stored column (DESIGN §6 plus ``instance_ended_at``), Python-typed."""
        out: dict[str, Any] = {name: getattr(self.state, name) for name in STATE_FIELDS}
        out["version"] = self.version
        out["last_event_id"] = self.last_event_id
        out["updated_at"] = self.updated_at
        return out

    @classmethod
    def from_values(cls, values: dict[str, Any]) -> AuditRow:
        state = AuditState(**{name: values[name] for name in STATE_FIELDS if name in values})
        last = values.get("last_event_id")
        return cls(
            state=state,
            version=values.get("version") or 0,
            last_event_id=uuid.UUID(str(last)) if last else None,
            updated_at=values.get("updated_at"),
        )


def _applied(state: AuditState, event: AuditEvent) -> int:
    """1 when the transition table applies ``event`` to ``state``, else 0: ``version`` counts
    the events applied; those recorded but not applied (before AuditStarted, after a terminal
    state) are history only."""
    return 0 if next_status(state.status, event.type, state) is None else 1


def project(row: AuditRow | None, event: AuditEvent) -> AuditRow:
    """The row after ``event``: pure, total, and equal to ``evolve`` on the state."""
    state = row.state if row is not None else initial(event.audit_id)
    return AuditRow(
        state=evolve(state, event),
        version=(row.version if row is not None else 0) + _applied(state, event),
        last_event_id=event.event_id,
        updated_at=row.updated_at if row is not None else None,
    )


class RowFold:
    """A batch of events folded into their audits' rows: :func:`project` applied event by
    event, keeping only each audit's latest row. ``rows`` is not changed."""

    __slots__ = ("_open", "_rows")

    def __init__(self, rows: Mapping[str, AuditRow]) -> None:
        self._rows = rows
        # audit id -> [state, version, last event id, updated_at], changed in place
        self._open: dict[str, list[Any]] = {}

    def add(self, event: AuditEvent) -> None:
        """Fold ``event`` into its audit's row."""
        entry = self._open.get(event.audit_id)
        if entry is None:
            row = self._rows.get(event.audit_id)
            entry = (
                [row.state, row.version, row.last_event_id, row.updated_at]
                if row is not None
                else [initial(event.audit_id), 0, None, None]
            )
            self._open[event.audit_id] = entry
        state = entry[0]
        entry[0] = evolve(state, event)
        entry[1] += _applied(state, event)
        entry[2] = event.event_id

    def changed(self) -> dict[str, AuditRow]:
        """The row of each audit that exists after the events folded so far, by audit id (an
        audit only ever seen in events recorded before its start has no row)."""
        return {
            audit_id: AuditRow(state, version, last, updated)
            for audit_id, (state, version, last, updated) in self._open.items()
            if state.exists  # no transition leads back to the initial status
        }


def row_dict(row: AuditRow) -> dict[str, Any]:
    """The row as JSON-ready data with the column names of DESIGN §6."""
    values = row.values()
    out: dict[str, Any] = {}
    for name in COLUMNS:
        value = values[name]
        if isinstance(value, datetime):
            value = value.isoformat().replace("+00:00", "Z")
        elif isinstance(value, uuid.UUID):
            value = str(value)
        out[name] = value
    return out
