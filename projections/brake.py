"""The mass-failure brake's port: the brake itself (engaged by a sweep, ended by an operator)
and the running audits whose decisions it holds.

Users: the mass-failure brake (``consumers/components/brake.py``), the reconciler (whether
the brake is engaged), and the HTTP API and the CLI (the brake's state in health and outcomes).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime

from projections.row import AuditRow
from projections.values import BrakeState

__all__ = ["BrakeStore"]


class BrakeStore(ABC):
    @abstractmethod
    async def state(self) -> BrakeState: ...

    @abstractmethod
    async def engage_brake(self, sweep_id: str, lost: int, observations: int, at: datetime) -> bool:
        """Engage the brake; True when it was not engaged before (an engaged brake keeps the
        sweep that engaged it)."""

    @abstractmethod
    async def end_brake(self, how: str, actor: str, at: datetime) -> BrakeState:
        """Disengage the brake (``how``: ``released`` or ``discarded``); returns the state it
        had before."""

    @abstractmethod
    async def held_audits(self, limit: int | None = None) -> list[AuditRow]:
        """Running audits with a decision held by the brake, oldest hold first."""
