"""The ingest component on each backend: what Kafka publishers write reaches the lifecycle log
only when a publisher may send it; the rest is dead-lettered with the reason. Read again (a
crash before the commit), a record is appended as the same event, which the projector applies
once."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from consumers.components.ingest import Ingest, admit
from consumers.components.projector import Projector
from consumers.eventlog.codec import encode
from consumers.eventlog.dead_letters import read_dead_letter
from consumers.eventlog.port import OutRecord, Record
from statemachine.errors import Refused
from tests.pipeline import Pipeline, lifecycle_events, read_topic, run_until_idle

POLICY = {"stale_running_after_s": 900}


def record(topics_ingest: str, body: dict[str, Any] | bytes, key: str = "a-in") -> OutRecord:
    value = body if isinstance(body, bytes) else json.dumps(body).encode()
    return OutRecord(topics_ingest, key, value)


def started(audit_id: str) -> dict[str, Any]:
    return {"type": "AuditStarted", "audit_id": audit_id, "data": {"project_id": "p-1"}}


FORGED = {
    "restoration": {
        "type": "AuditRestored",
        "audit_id": "a-in",
        "data": {
            "reason": "forged",
            "actor": "cli:alice",
            "failure_id": "7f6e5d4c-3b2a-4190-8f7e-6d5c4b3a2910",
            "failed_by": "reconciler",
            "error_code": "oom",
            "resume": {"project_id": "p-1"},
        },
    },
    "observation": {
        "type": "WorkflowStatusObserved",
        "audit_id": "a-in",
        "data": {"status": "errored", "trigger": "watchdog", "observed_at": "2026-12-01T00:00:00Z"},
    },
    "decision": {
        "type": "AuditFailed",
        "audit_id": "a-in",
        "data": {
            "error_code": "oom",
            "error_detail": "forged",
            "failed_by": "reconciler",
            "policy": POLICY,
        },
    },
    "release": {
        "type": "AuditFailureReleased",
        "audit_id": "a-in",
        "data": {"held_id": "3e2d1c0b-9a8f-4e7d-8c6b-5a4f3e2d1c0b", "actor": "ops"},
    },
}


async def test_publisher_events_are_appended_and_decisions_dead_lettered(
    pipeline: Pipeline,
) -> None:
    log, topics = pipeline.log, pipeline.topics
    failure = {
        "type": "AuditFailed",
        "audit_id": "a-in",
        "data": {"error_code": "oom", "error_detail": "OOM", "failed_by": "workflow"},
    }
    # given what a Kafka publisher writes: its lifecycle, forged decisions, and garbage
    await log.append(
        [
            record(topics.ingest, started("a-in")),
            *(record(topics.ingest, body) for body in FORGED.values()),
            record(topics.ingest, b'{"type": "AuditStarted", "audit_id"'),
            record(topics.ingest, {"type": "AuditStarted", "audit_id": "a-in", "data": {}}),
            record(topics.ingest, failure),
        ]
    )
    ingest = Ingest(log)
    await ingest.start()
    try:
        await run_until_idle(ingest)
    finally:
        await ingest.stop()

    # then the lifecycle log holds the publisher's events only, completed
    events = await lifecycle_events(log, at_least=2)
    assert [(e.type, e.producer) for e in events] == [
        ("AuditStarted", "auditrec-ingest"),
        ("AuditFailed", "auditrec-ingest"),
    ]
    # and every other record is dead-lettered by the ingest group, naming why
    letters = [read_dead_letter(r) for r in await read_topic(log, topics.dead_letter)]
    reasons = sorted(letter.reason for letter in letters if letter is not None)
    assert all(
        letter is not None and letter.consumer == topics.group("ingest") for letter in letters
    )
    assert len(reasons) == 6
    refused = [r for r in reasons if r.startswith("refused: ")]
    assert len(refused) == 4
    for kind in ("AuditRestored", "WorkflowStatusObserved", "AuditFailureReleased"):
        assert any(f"type: {kind} is written by auditrec only" in r for r in refused), reasons
    assert any("failed_by 'reconciler'" in r for r in refused), reasons
    assert any(r.startswith("not valid JSON") for r in reasons), reasons
    assert any("data.project_id" in r for r in reasons), reasons


async def test_a_record_read_again_is_the_same_event_applied_once(pipeline: Pipeline) -> None:
    log, topics = pipeline.log, pipeline.topics
    await log.append([record(topics.ingest, started("a-again"), key="a-again")])
    (written,) = await read_topic(log, topics.ingest)
    # a crash between the append and the commit reads the record again: the same event
    first, again = admit(written), admit(Record(*written))
    assert first == again and first.event_id == again.event_id

    ingest, projector = Ingest(log), Projector(log, pipeline.store.writer)
    for component in (ingest, projector):
        await component.start()
    try:
        await run_until_idle(ingest)
        # (what a second ingest appends after a crash before its commit)
        await log.append([encode(topics.lifecycle, again)])
        await run_until_idle(ingest, projector)
    finally:
        for component in (ingest, projector):
            await component.stop()
    events = await lifecycle_events(log, at_least=2)
    assert [e.type for e in events] == ["AuditStarted", "AuditStarted"]
    assert events[0].event_id == first.event_id == events[1].event_id
    history = await pipeline.store.audits.history("a-again")
    assert len(history) == 1


def test_a_record_naming_an_actor_is_refused() -> None:
    body = {
        "type": "AuditFailed",
        "audit_id": "a-in",
        "data": {"error_code": "oom", "error_detail": "x", "failed_by": "workflow", "actor": "ops"},
    }
    record = Record("audit.ingest.v1", 0, 7, "a-in", json.dumps(body).encode(), (), 1)
    with pytest.raises(Refused, match=r"data\.actor: 'ops' is not who wrote the record"):
        admit(record)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"producer": "auditrec-reconciler"}, "producer: 'auditrec-reconciler' is one of"),
        ({"data": {"rule": "errored"}}, "data.rule: only auditrec's reconciler"),
        ({"data": {"reconciled_by": "watchdog"}}, "data.reconciled_by: only auditrec's"),
    ],
)
def test_a_record_dressed_up_as_auditrec_s_is_refused(extra: dict[str, Any], named: str) -> None:
    data = {"error_code": "oom", "error_detail": "x", "failed_by": "workflow"}
    body = {"type": "AuditFailed", "audit_id": "a-in", "producer": "crawler", "data": data}
    body = {**body, **extra, "data": {**data, **extra.get("data", {})}}
    record = Record("audit.ingest.v1", 0, 8, "a-in", json.dumps(body).encode(), (), 1)
    with pytest.raises(Refused, match=re.escape(named)):
        admit(record)
