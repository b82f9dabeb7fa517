"""The projector's write port: a batch of events folded into rows and history together with
the consumed offsets, the offsets read back on assignment, and the reset a rebuild starts from.

Users: the projector (``consumers/components/projector.py``), the rebuild
(``consumers/operations/rebuild.py``); and, for the offsets alone, freshness (how far the
projection is behind the log) and retention (which trims no further).

:meth:`ProjectionWriter.apply` writes rows, history and the consumed offsets in one
transaction; an ``event_id`` already in the history is skipped, so a redelivered batch changes
nothing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

from projections.values import ApplyResult, Position
from statemachine.events import AuditEvent

__all__ = ["ProjectionWriter"]


class ProjectionWriter(ABC):
    @abstractmethod
    async def apply(
        self,
        events: Sequence[tuple[AuditEvent, Position]],
        offsets: Mapping[tuple[str, int], int],
        consumer: str,
        bodies: Sequence[bytes | None] | None = None,
    ) -> ApplyResult:
        """Fold ``events`` into rows and history and store ``offsets`` (next offset per
        topic-partition) for ``consumer``, in one transaction. Events already in the history
        (by ``event_id``) are skipped.

        ``bodies``, parallel to ``events``, may give an event's JSON as read from the log when
        it is valid current-version JSON of that very event
        (:func:`consumers.eventlog.codec.decode_verbatim`); the history stores it instead of
        serialising the event again. ``None`` entries are serialised."""

    @abstractmethod
    async def stored_offsets(self, consumer: str) -> dict[tuple[str, int], int]: ...

    @abstractmethod
    async def reset(self, consumer: str) -> None:
        """Empty rows, history and ``consumer``'s offsets (for a rebuild)."""
