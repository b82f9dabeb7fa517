"""The projector's write port: a batch of events folded into rows and history together with
the consumed offsets, the offsets read back on assignment, and the reset a rebuild starts from.

Users: the projector (``consumers/components/projector.py``), the rebuild
(``consumers/operations/rebuild.py``); and, for the offsets alone, freshness (how far the
projection is behind the log) and retention (which trims no further).

:meth:`ProjectionWriter.apply` writes rows, history and the consumed offsets in one
transaction. The history is keyed by ``(audit_id, event_id)``
(:mod:`statemachine.idempotency`): an event whose key is recorded with the same content is
skipped, so a redelivered batch changes nothing; one whose key names other content is a
conflict, never applied, and handed to the caller before the transaction commits.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence

import msgspec
from pydantic import BaseModel

from projections.values import ApplyResult, Position
from statemachine.events import EVENT_ADAPTER, AuditEvent
from statemachine.upcasting import upcast

__all__ = ["OnConflicts", "ProjectionWriter", "event_model"]

OnConflicts = Callable[[Sequence[tuple[int, str]]], Awaitable[None]]
"""Called with a batch's conflicts (index in the batch, reason) inside its transaction, before
it commits: what it sets aside is never lost to a crash after the commit."""


def event_model(event: AuditEvent, body: bytes | str | None) -> AuditEvent:
    """``event`` as a validated model, to compare its content: itself when it is one, else
    (a read-only view of it) decoded again from ``body``, its JSON as read."""
    if isinstance(event, BaseModel):
        return event
    raw = json.loads(body) if body is not None else msgspec.to_builtins(event)
    return EVENT_ADAPTER.validate_python(upcast(raw))


class ProjectionWriter(ABC):
    @abstractmethod
    async def apply(
        self,
        events: Sequence[tuple[AuditEvent, Position]],
        offsets: Mapping[tuple[str, int], int],
        consumer: str,
        bodies: Sequence[bytes | None] | None = None,
        on_conflicts: OnConflicts | None = None,
    ) -> ApplyResult:
        """Fold ``events`` into rows and history and store ``offsets`` (next offset per
        topic-partition) for ``consumer``, in one transaction. An event whose
        ``(audit_id, event_id)`` the history or an earlier event of the batch holds is not
        applied: skipped when it repeats that content, else a conflict, given to
        ``on_conflicts`` before the transaction commits (its failure rolls the batch back) and
        in the result.

        ``bodies``, parallel to ``events``, may give an event's JSON as read from the log when
        it is valid current-version JSON of that very event
        (:func:`consumers.eventlog.codec.decode_verbatim`); the history stores it instead of
        serialising the event again. ``None`` entries are serialised."""

    @abstractmethod
    async def stored_offsets(self, consumer: str) -> dict[tuple[str, int], int]: ...

    @abstractmethod
    async def reset(self, consumer: str) -> None:
        """Empty rows, history and ``consumer``'s offsets (for a rebuild)."""
