"""The projection store's contracts: what they share (:class:`StoreFixtures`, the event
builders) and the store's own, :class:`ProjectionStoreContract` (starting, stopping, the
schema). Each port has a suite of its own beside this module (``projection_<port>.py``:
``audits``, ``writer``, ``kept``, ``coordination``, ``sweeps``, ``brake``, ``budget``,
``checkpoints``, ``telemetry``, ``deliveries``), and every adapter passes every suite
unchanged.

Abstract (the module names do not start with ``test_``, so pytest does not collect them). A
backend subclasses each suite in a ``test_*.py`` module and provides:

- the ``make_store`` fixture: a factory of *unstarted* stores that all share one fresh,
  isolated database (a file, a schema) for the test;
- for :class:`~tests.contracts.projection_writer.ProjectionWriterContract`,
  ``poison_offsets``: make the next write of offsets for consumer ``"poison"`` fail inside the
  database (a trigger), for the atomicity test.

Events are built from ``statemachine.events`` models; the expected rows are the pure fold
``projections.row.project`` over the same events.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from projections.audits import AuditReads
from projections.brake import BrakeStore
from projections.budget import RequestBudget
from projections.checkpoints import CheckpointStore
from projections.coordination import Coordination
from projections.deliveries import OutcomeDeliveries
from projections.kept import KeptHistory
from projections.orphans import OrphanInstances
from projections.row import AuditRow, project
from projections.store import ProjectionStore
from projections.sweeps import Sweeps
from projections.telemetry import SentTelemetry
from projections.values import Position
from projections.writer import ProjectionWriter
from statemachine.errors import StoreError
from statemachine.events import (
    AuditCompleted,
    AuditEvent,
    AuditFailed,
    AuditFailureHeld,
    AuditFailureReleased,
    AuditFailureSimulated,
    AuditProgressed,
    AuditStarted,
    WorkflowInstanceAttached,
    WorkflowProbeFailed,
    WorkflowStatusObserved,
)

__all__ = ["MakeStore", "ProjectionStoreContract", "StoreFixtures"]

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
TOPIC = "audit.lifecycle.v1"
CONSUMER = "projector"

MakeStore = Callable[[], ProjectionStore]


# -- event builders -----------------------------------------------------------------------


def at(minutes: float = 0, seconds: float = 0) -> datetime:
    return T0 + timedelta(minutes=minutes, seconds=seconds)


def _env(audit_id: str, when: datetime, **extra: Any) -> dict[str, Any]:
    return {
        "event_id": extra.pop("event_id", None) or uuid.uuid4(),
        "audit_id": audit_id,
        "occurred_at": when,
        "producer": "contract",
        **extra,
    }


def started(
    audit_id: str, when: datetime = T0, instance: str | None = "wf-1", **data: Any
) -> AuditStarted:
    payload = {"project_id": "p-1", "workflow_instance_id": instance, **data}
    return AuditStarted(**_env(audit_id, when), data=payload)


def attached(audit_id: str, instance: str, when: datetime = T0) -> WorkflowInstanceAttached:
    return WorkflowInstanceAttached(**_env(audit_id, when), data={"workflow_instance_id": instance})


def progressed(audit_id: str, when: datetime = T0, **data: Any) -> AuditProgressed:
    return AuditProgressed(**_env(audit_id, when), data=data)


def completed(audit_id: str, when: datetime = T0, **data: Any) -> AuditCompleted:
    return AuditCompleted(**_env(audit_id, when), data=data)


def failed(
    audit_id: str, when: datetime = T0, by: str = "workflow", code: str = "oom", **extra: Any
) -> AuditFailed:
    data = {"error_code": code, "error_detail": f"{code} detail", "failed_by": by, **extra}
    return AuditFailed(**_env(audit_id, when), data=data)


def simulated(audit_id: str, when: datetime = T0) -> AuditFailureSimulated:
    data = {
        "error_code": "instance_lost",
        "error_detail": "Workflow instance was not found",
        "failed_by": "reconciler",
        "reconciled_by": "watchdog",
    }
    return AuditFailureSimulated(**_env(audit_id, when), data=data)


def stall(audit_id: str, when: datetime = T0) -> AuditFailureSimulated:
    """A stall verdict recorded in report mode (``AUDITREC_STALLED_ACTION=report``)."""
    data = {
        "error_code": "stalled",
        "error_detail": "No progress for 50m while the instance was running",
        "failed_by": "reconciler",
        "reconciled_by": "watchdog",
        "rule": "stalled",
        "workflow_status": "running",
        "policy": {"progress_recorded_at": (when - timedelta(minutes=50)).isoformat()},
    }
    return AuditFailureSimulated(**_env(audit_id, when), data=data)


def observed(
    audit_id: str,
    status: str,
    when: datetime = T0,
    instance: str | None = "wf-1",
    causation_id: uuid.UUID | None = None,
    **data: Any,
) -> WorkflowStatusObserved:
    payload = {
        "workflow_instance_id": instance,
        "status": status,
        "trigger": "watchdog",
        "observed_at": when,
        **data,
    }
    return WorkflowStatusObserved(**_env(audit_id, when, causation_id=causation_id), data=payload)


def probe_failed(
    audit_id: str, when: datetime = T0, causation_id: uuid.UUID | None = None
) -> WorkflowProbeFailed:
    data = {
        "workflow_instance_id": "wf-1",
        "reason": "timeout",
        "detail": "probe gave up",
        "trigger": "watchdog",
        "observed_at": when,
    }
    return WorkflowProbeFailed(**_env(audit_id, when, causation_id=causation_id), data=data)


def held(audit_id: str, when: datetime = T0) -> AuditFailureHeld:
    decision = {
        "error_code": "instance_lost",
        "error_detail": "Workflow instance was not found",
        "failed_by": "reconciler",
        "rule": "instance_lost",
    }
    data = {"decision": decision, "reason": "the mass-failure brake is engaged"}
    return AuditFailureHeld(**_env(audit_id, when), data=data)


def released(hold: AuditFailureHeld, when: datetime = T0) -> AuditFailureReleased:
    data = {"held_id": hold.event_id, "actor": "cli:ops"}
    return AuditFailureReleased(**_env(hold.audit_id, when), data=data)


_offsets = itertools.count()


def positioned(
    events: Sequence[AuditEvent], partition: int = 0
) -> list[tuple[AuditEvent, Position]]:
    return [(e, (TOPIC, partition, next(_offsets))) for e in events]


def next_offsets(batch: Sequence[tuple[AuditEvent, Position]]) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for _, (topic, partition, offset) in batch:
        out[(topic, partition)] = max(out.get((topic, partition), 0), offset + 1)
    return out


def pure_fold(events: Sequence[AuditEvent]) -> dict[str, AuditRow]:
    rows: dict[str, AuditRow] = {}
    for event in events:
        rows[event.audit_id] = project(rows.get(event.audit_id), event)
    return {k: r for k, r in rows.items() if r.state.exists}


def same_row(stored: AuditRow | None, expected: AuditRow) -> bool:
    """Equal but for ``updated_at``, which the store sets."""
    return (
        stored is not None
        and stored.state == expected.state
        and stored.version == expected.version
        and stored.last_event_id == expected.last_event_id
    )


def assert_utc(value: datetime | None) -> None:
    assert value is not None
    assert value.tzinfo is not None and value.utcoffset() == timedelta(0)


def lifecycle_mix() -> list[AuditEvent]:
    """Several audits through every kind of transition, in log order."""
    return [
        started("a-run", at(0), pages_total=10, start_url="https://example.com/"),
        started("a-done", at(1), organization_id="org-1", started_by_user_id="u-1"),
        started("a-fail", at(2), instance=None),
        started("a-over", at(3)),
        attached("a-fail", "wf-9", at(4)),
        progressed("a-run", at(5), current_phase="crawl", pages_crawled=3),
        observed("a-run", "running", at(6)),
        probe_failed("a-run", at(7)),
        observed("a-run", "running", at(8), instance="wf-other"),  # stale: ignored
        progressed("a-done", at(9), pages_crawled=7, pages_total=7),
        completed("a-done", at(10), pages_crawled=7),
        progressed("a-done", at(11), current_phase="late", pages_crawled=99),  # after terminal
        failed("a-fail", at(12), by="workflow", code="oom", failed_phase="crawl"),
        started("a-fail", at(13), project_id="p-2"),  # second start: recorded, not applied
        failed(
            "a-over",
            at(14),
            by="reconciler",
            code="finalize_lost",
            reconciled_by="watchdog",
            policy={
                "finalize_grace_s": 600.0,
                "mode": "enforce",
                "count": 3,
                "shadow": False,
                "x": None,
            },
        ),
        simulated("a-run", at(15)),
        completed("a-over", at(16)),  # overturns the reconciler's failure
        observed("a-over", "complete", at(17)),  # observation of a terminal audit
    ]


class StoreFixtures:
    """What every suite of the store's ports is given: ``make_store`` (from the backend) and
    a started, initialised ``store`` made by it."""

    @pytest.fixture
    def make_store(self) -> MakeStore:
        raise NotImplementedError

    @pytest.fixture
    async def store(self, make_store: MakeStore) -> AsyncIterator[ProjectionStore]:
        s = make_store()
        await s.start()
        await s.init()
        try:
            yield s
        finally:
            await s.stop()

    @staticmethod
    async def rows_of(store: ProjectionStore) -> dict[str, AuditRow]:
        return {r.audit_id: r async for r in store.audits.iter_rows()}


class ProjectionStoreContract(StoreFixtures):
    """The store itself: its connection's lifecycle and its schema."""

    def test_each_concept_is_given_by_its_port(self, make_store: MakeStore) -> None:
        store = make_store()
        ports = {
            "audits": AuditReads,
            "writer": ProjectionWriter,
            "kept": KeptHistory,
            "coordination": Coordination,
            "sweeps": Sweeps,
            "brake": BrakeStore,
            "budget": RequestBudget,
            "checkpoints": CheckpointStore,
            "telemetry": SentTelemetry,
            "deliveries": OutcomeDeliveries,
            "orphans": OrphanInstances,
        }
        assert set(ProjectionStore.__annotations__) == set(ports)  # every concept, no other
        for name, port in ports.items():
            assert isinstance(getattr(store, name), port), name

    async def test_init_is_idempotent_and_returns_the_schema_version(
        self, make_store: MakeStore
    ) -> None:
        async with make_store() as store:
            first = await store.init()
            assert first >= 1
            assert await store.init() == first
            await store.writer.apply(positioned([started("a-1")]), {}, CONSUMER)
        async with make_store() as again:
            assert await again.init() == first
            assert (await again.audits.get("a-1")) is not None  # init keeps data

    async def test_start_and_stop_are_idempotent_and_a_stopped_store_starts_again(
        self, make_store: MakeStore
    ) -> None:
        store = make_store()
        await store.start()
        await store.start()
        await store.init()
        await store.writer.apply(positioned([started("a-1")]), {}, CONSUMER)
        await store.stop()
        await store.stop()
        with pytest.raises(StoreError):
            await store.audits.get("a-1")
        async with store:
            await store.ping()
            row = await store.audits.get("a-1")
            assert row is not None and row.version == 1

    async def test_a_stopped_store_raises_a_non_retriable_store_error(
        self, make_store: MakeStore
    ) -> None:
        store = make_store()
        with pytest.raises(StoreError) as info:
            await store.audits.get("a-1")
        assert info.value.retriable is False
