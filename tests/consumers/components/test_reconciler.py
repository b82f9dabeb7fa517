"""The reconciler component against the embedded log: what survives a failed commit."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from consumers.components.reconciler import Reconciler
from consumers.eventlog.codec import decode, encode
from consumers.eventlog.port import Topics
from consumers.eventlog.sqlite.log import SQLiteEventLog
from statemachine.errors import EventLogError
from statemachine.events import (
    AuditStarted,
    AuditStartedData,
    Trigger,
    WorkflowStatusObserved,
    WorkflowStatusObservedData,
)
from statemachine.policy import Policy

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
async def log(tmp_path: Path) -> AsyncIterator[SQLiteEventLog]:
    log = SQLiteEventLog(f"sqlite:///{tmp_path}/events.db", Topics("r"))
    await log.start()
    await log.init()
    yield log
    await log.stop()


def observed(hours: int) -> WorkflowStatusObserved:
    at = T0 + timedelta(hours=hours)
    return WorkflowStatusObserved(
        event_id=uuid.uuid4(),
        audit_id="a1",
        occurred_at=at,
        producer="auditrec-probe",
        data=WorkflowStatusObservedData(
            workflow_instance_id="w1",
            status="errored",
            error="Worker exceeded memory limit",
            trigger=Trigger.WATCHDOG,
            observed_at=at,
        ),
    )


async def decisions(log: SQLiteEventLog) -> list[Any]:
    topic = log.topics.lifecycle
    events = [decode(r.value) async for batch in log.inspection.read(topic, 0, 0) for r in batch]
    return [e for e in events if e.type == "AuditFailed"]


async def test_a_decision_whose_commit_failed_is_made_again_after_the_restart(
    log: SQLiteEventLog,
) -> None:
    # given a dead audit's observation, and a commit that fails once
    started = AuditStarted(
        event_id=uuid.uuid4(),
        audit_id="a1",
        occurred_at=T0,
        producer="crawler",
        data=AuditStartedData(project_id="p", workflow_instance_id="w1"),
    )
    topic = log.topics.lifecycle
    await log.append([encode(topic, started), encode(topic, observed(1))])
    reconciler = Reconciler(log, Policy())
    await reconciler.start()
    assert reconciler.consumer is not None
    real_commit = reconciler.consumer.commit

    async def failing(*args: Any, **kwargs: Any) -> None:
        raise EventLogError("transient", retriable=True)

    reconciler.consumer.commit = failing  # type: ignore[method-assign]
    with pytest.raises(EventLogError):  # at the latest in the step after the batch's
        for _ in range(3):
            await reconciler.step()
    assert await decisions(log) == []

    # when the runner restarts the component, as it does after a failed step
    reconciler.consumer.commit = real_commit  # type: ignore[method-assign]
    await reconciler.stop()
    await reconciler.start()
    for _ in range(3):
        await reconciler.step()

    # then the decision is made, exactly once, and a later observation adds none
    await log.append([encode(topic, observed(2))])
    for _ in range(3):
        await reconciler.step()
    made = await decisions(log)
    assert [d.data.error_code for d in made] == ["oom"]
    await reconciler.stop()
