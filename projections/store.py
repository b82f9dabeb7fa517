"""The projection store: one database holding the read model and the small amount of shared
state the services keep beside it, seen through one port per concept.

:class:`ProjectionStore` owns the connection (``start``/``stop``, ``async with``, ``init``,
``ping``) and gives each concept's port as an attribute, so a caller names the concept it uses
and is typed against that port alone:

- ``audits`` (:mod:`projections.audits`): rows and history, the read model;
- ``writer`` (:mod:`projections.writer`): the projector's apply, its offsets, the reset;
- ``kept`` (:mod:`projections.kept`): history set aside for a rebuild over a trimmed log;
- ``coordination`` (:mod:`projections.coordination`): watchdog lock, heartbeats, tick claims;
- ``sweeps`` (:mod:`projections.sweeps`): watchdog sweeps awaiting the brake's verdict;
- ``brake`` (:mod:`projections.brake`): the mass-failure brake and the audits it holds;
- ``budget`` (:mod:`projections.budget`): the Workflows API's request slots and pauses;
- ``checkpoints`` (:mod:`projections.checkpoints`): stateful consumers' checkpoints;
- ``telemetry`` (:mod:`projections.telemetry`): the telemetry outbox's sent events;
- ``deliveries`` (:mod:`projections.deliveries`): the outcome feed's endpoints and parked entries;
- ``orphans`` (:mod:`projections.orphans`): the watched workflows, their orphan instances and
  each one's history.

Two adapters implement every port, ``sqlite/`` and ``postgres/`` (one module per concept,
sharing the backend's connection); both pass each port's suite in ``tests/contracts/``. The
values they take and give are ``values.py``'s.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from projections.audits import AuditReads
from projections.brake import BrakeStore
from projections.budget import RequestBudget
from projections.checkpoints import CheckpointStore
from projections.coordination import Coordination
from projections.deliveries import OutcomeDeliveries
from projections.kept import KeptHistory
from projections.orphans import OrphanInstances
from projections.sweeps import Sweeps
from projections.telemetry import SentTelemetry
from projections.writer import ProjectionWriter
from statemachine.longlived import LongLived

__all__ = ["ProjectionStore"]


class ProjectionStore(LongLived, ABC):
    """``async with`` starts and stops it; both idempotent. A port used while the store is
    stopped raises a non-retriable :class:`~statemachine.errors.StoreError`."""

    audits: AuditReads
    writer: ProjectionWriter
    kept: KeptHistory
    coordination: Coordination
    sweeps: Sweeps
    brake: BrakeStore
    budget: RequestBudget
    checkpoints: CheckpointStore
    telemetry: SentTelemetry
    deliveries: OutcomeDeliveries
    orphans: OrphanInstances

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def stop(self) -> None: ...

    @abstractmethod
    async def init(self) -> int:
        """Create or upgrade the schema (idempotent); returns the schema version."""

    @abstractmethod
    async def ping(self) -> None: ...
