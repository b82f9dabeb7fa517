"""The outcome feed's port: the endpoints it delivers to, and the entries parked on them.

An entry the feed could not deliver within its retry time is *parked* here, with the entries of
the same audit that came after it on that endpoint (parked *behind* it, so the audit's order is
kept), until an operator asks for a retry (``auditrec deliveries retry``). A retry is per audit:
asking for one entry asks for every entry of its audit parked on that endpoint, delivered in
the order they were parked; an entry that fails again is parked again with every entry of its
audit. A delivered entry is removed.

Users: the outcome feed (``consumers/components/outcomes/``), and the HTTP API, the CLI and the
console (``deliveries list|retry``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from datetime import datetime

from projections.values import ParkedEntry

__all__ = ["OutcomeDeliveries"]


class OutcomeDeliveries(ABC):
    @abstractmethod
    async def register(self, endpoint: str, target: str, at: datetime) -> datetime:
        """Remember ``endpoint`` (delivering to ``target``, shown to operators) as of ``at``
        unless known (then ``target`` is updated); when it was first registered. An endpoint
        receives the outcomes of events recorded from then on."""

    @abstractmethod
    async def park(self, entries: Sequence[ParkedEntry]) -> None:
        """Park ``entries`` (idempotent by ``(endpoint, outcome_id)``: one parked already
        keeps its row), numbered in the order given after every entry parked before
        (``ParkedEntry.seq`` is assigned here, and the given one ignored). An entry parked
        behind others of its audit on its endpoint takes their retry request: requested (by
        whom, when) when the latest of them is; else none is (the given one is ignored)."""

    @abstractmethod
    async def parked(
        self, endpoint: str | None = None, *, limit: int = 100, after: int = 0
    ) -> list[ParkedEntry]:
        """The parked entries (of ``endpoint``, else of every endpoint) with ``seq`` above
        ``after``, in ``seq`` order, at most ``limit``."""

    @abstractmethod
    async def parked_counts(self) -> dict[str, int]:
        """How many entries each endpoint has parked (endpoints with none are left out)."""

    @abstractmethod
    async def parked_audits(self, endpoint: str, partitions: Iterable[int]) -> set[str]:
        """The audits of ``partitions`` with an entry parked on ``endpoint``."""

    @abstractmethod
    async def request_retry(
        self, endpoint: str | None, outcome_ids: Sequence[str] | None, actor: str, at: datetime
    ) -> int:
        """Ask for the retry of ``outcome_ids`` (``None``: every parked entry) on ``endpoint``
        (``None``: on every endpoint), each with every entry of its audit parked on the same
        endpoint; how many entries were asked for (one already asked for is not counted, and
        an id parked nowhere asks for nothing)."""

    @abstractmethod
    async def retry_requested(
        self, endpoint: str, partitions: Iterable[int], limit: int = 100
    ) -> list[ParkedEntry]:
        """The entries of ``partitions`` on ``endpoint`` whose retry was asked for, in ``seq``
        order, at most ``limit``."""

    @abstractmethod
    async def delivered(self, endpoint: str, outcome_ids: Sequence[str]) -> set[str]:
        """Remove ``outcome_ids`` from ``endpoint``'s parked entries; the audits they belonged
        to that have no entry parked on ``endpoint`` any more."""

    @abstractmethod
    async def park_again(
        self, endpoint: str, outcome_id: str, attempts: int, error: str, at: datetime
    ) -> None:
        """A retried entry failed again (at ``at``): it records ``attempts`` and ``error``,
        and it and every entry of its audit on ``endpoint`` are parked again (no retry asked
        for), each keeping its ``seq`` and ``parked_at`` (when it was first parked). An
        unknown entry changes nothing."""
