"""The orphans' port: the workflows auditrec watches (since when), the instances of them that no
audit holds, and each one's history.

An *orphan* is an instance listed alive in a watched workflow that no audit holds, older than
``AUDITREC_INSTANCE_LOST_GRACE`` and created after auditrec began watching its workflow
(``watch``: when a workflow is first registered, never moved; on a first deployment every older
instance has no audit yet and is no orphan). The orphan scan
(``consumers/components/orphans.py``) records what each listing shows (``record_scan``); an
operator terminates orphans (``ask_termination``, then ``termination_result``). Every change is
an entry of the orphan's append-only history, with the actor for terminations.

Orphans live here, not in the lifecycle log: they have no audit, and an event about one would
make an audit nobody started, fed to the projection and to the outcome feed.

Users: the orphan scan (in the watchdog), and the HTTP API, the CLI and the console
(``auditrec orphans``, ``/orphans``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime

from projections.values import Orphan, OrphanEvent, OrphanScanRecord, OrphanSighting

__all__ = ["ORPHAN_STATES", "TERMINATION_RESULTS", "OrphanInstances"]

ORPHAN_STATES = ("open", "gone", "terminated")
TERMINATION_RESULTS = ("terminated", "already_ended", "not_found", "failed")


class OrphanInstances(ABC):
    @abstractmethod
    async def watch(self, workflows: Sequence[str], at: datetime) -> dict[str, datetime]:
        """Register ``workflows`` as watched since ``at``, each unless known (its first
        registration is kept, never moved); when each of them is watched since."""

    @abstractmethod
    async def watched(self) -> dict[str, datetime]:
        """Every workflow registered, and since when it is watched."""

    @abstractmethod
    async def held(self, instance_ids: Sequence[str]) -> set[str]:
        """Those of ``instance_ids`` that an audit holds (any status). Compared by instance
        id alone: an audit's ``workflow`` is ``None`` for the default workflow, and an id held
        in any workflow is held."""

    @abstractmethod
    async def record_scan(
        self, workflow: str, found: Sequence[OrphanSighting], at: datetime
    ) -> OrphanScanRecord:
        """A scan of ``workflow`` begun at ``at`` listed ``found`` alive with no audit: a new
        one is recorded ``open`` (history ``found``), a ``gone`` one is open again (``found``),
        an open one takes the status listed (``seen`` when it changed) and ``last_seen``; a
        ``terminated`` one keeps its state (``last_seen`` moves). Every other open orphan of
        ``workflow`` is ``gone``: ``adopted`` when an audit holds it now, else ``gone``."""

    @abstractmethod
    async def get(self, workflow: str, instance_id: str) -> Orphan | None: ...

    @abstractmethod
    async def page(
        self,
        workflow: str | None = None,
        *,
        state: str | None = "open",
        limit: int = 100,
        after: int = 0,
    ) -> list[Orphan]:
        """The orphans (of ``workflow``, else of every workflow; in ``state``, ``None``: any)
        with ``seq`` above ``after``, in ``seq`` order, at most ``limit``."""

    @abstractmethod
    async def open_counts(self) -> dict[str, int]:
        """How many open orphans each workflow has (workflows with none are left out)."""

    @abstractmethod
    async def history(self, workflow: str, instance_id: str) -> list[OrphanEvent]:
        """The orphan's history, oldest first (empty for an unknown one)."""

    @abstractmethod
    async def ask_termination(
        self,
        workflow: str,
        instance_id: str,
        actor: str,
        on_behalf_of: str | None,
        at: datetime,
    ) -> Orphan | None:
        """Record that ``actor`` asks for the orphan's termination (history
        ``terminate_asked``; ``terminated_by`` and ``on_behalf_of`` set, ``result`` and
        ``terminated_at`` cleared), only when it is ``open``; the orphan as it was before
        (``None``: unknown), so a caller sees whether it was open."""

    @abstractmethod
    async def termination_result(
        self, workflow: str, instance_id: str, result: str, detail: str | None, at: datetime
    ) -> Orphan | None:
        """The API's answer to a termination asked for (``result`` one of
        :data:`TERMINATION_RESULTS`): ``terminated`` → state ``terminated``;
        ``already_ended`` and ``not_found`` → ``gone``; ``failed`` leaves it ``open``
        (``result`` is ``failed: <detail>``). Recorded in the history, with ``detail``;
        ``terminated_at`` is ``at`` unless it failed. The orphan after (``None``: unknown)."""
