"""Inputs at the edges that must neither stop a consumer nor be accepted where they forge."""

from __future__ import annotations

import json

import pytest

from consumers.eventlog.codec import DEAD_LETTER_ORIGINAL_MAX, dead_letter, decode_verbatim
from consumers.eventlog.port import Record, Topics
from consumers.operations.publishing import validate_items
from consumers.workflows.client import ProbeFailure, WorkflowsClient
from consumers.workflows.simulator.server import SimulatorServer
from statemachine import upcasting as events
from statemachine.errors import InvalidInput, Refused


def test_the_dead_letter_of_a_huge_record_stays_bounded_and_says_so() -> None:
    record = Record("t.lifecycle.v1", 3, 42, "a-1", b'{"x": "' + b"y" * 900_000 + b'"}')
    letter = dead_letter(Topics("t"), record, "auditrec-projector", "too big to be an event")
    body = json.loads(letter.value)
    assert len(letter.value) < DEAD_LETTER_ORIGINAL_MAX + 4096
    assert body["original_truncated"] is True
    assert body["original_size"] == len(record.value)
    assert (body["source_partition"], body["source_offset"]) == (3, 42)
    assert body["original"] == record.value[:DEAD_LETTER_ORIGINAL_MAX].decode()


@pytest.mark.parametrize(
    "item",
    [
        {
            "type": "AuditFailed",
            "audit_id": "a-1",
            "data": {"error_code": "oom", "error_detail": "x", "failed_by": "reconciler"},
        },
        {
            "type": "AuditFailureSimulated",
            "audit_id": "a-1",
            "data": {"error_code": "oom", "error_detail": "x", "failed_by": "reconciler"},
        },
        {"type": "ProbeRequested", "audit_id": "a-1", "data": {"trigger": "manual"}},
    ],
)
def test_other_services_cannot_publish_what_only_auditrec_writes(item: dict[str, object]) -> None:
    with pytest.raises(InvalidInput) as err:
        validate_items([item])
    assert "item 0:" in err.value.problems[0]


def test_only_failures_reported_by_the_workflow_are_accepted() -> None:
    items = [
        {
            "type": "AuditFailed",
            "audit_id": "a-1",
            "data": {"error_code": "oom", "error_detail": "x", "failed_by": by},
        }
        for by in ("workflow", "operator")
    ]
    assert [e.data.failed_by.value for e in validate_items(items[:1])] == ["workflow"]  # type: ignore[union-attr]
    with pytest.raises(Refused, match="1 item"):
        validate_items(items)  # an operator's failure is `auditrec fail`'s to write


async def test_an_undecodable_answer_is_a_probe_failure_not_an_exception(
    simulator: SimulatorServer,
) -> None:
    simulator.sim.set_instance("wf-gz", "running")
    simulator.sim.set_fault(
        "wf-gz",
        "custom",
        http_status=200,
        headers={"content-encoding": "gzip", "content-type": "application/json"},
        body="this is not gzip",
    )
    async with WorkflowsClient(
        api_url=simulator.url, account_id="a", workflow="site-audit", api_token=None
    ) as client:
        result = await client.get_instance("wf-gz")
    assert isinstance(result, ProbeFailure)
    assert result.reason.value == "invalid_response"


def _progressed(version: int, **data: object) -> bytes:
    return json.dumps(
        {
            "event_id": "7d1f5b7e-3f0b-4bde-9d55-3c1a9a4e0c11",
            "schema_version": version,
            "audit_id": "a-1",
            "occurred_at": "2026-11-30T08:00:00+01:00",
            "producer": "crawler",
            "type": "AuditProgressed",
            "data": data,
        }
    ).encode()


def test_decode_verbatim_keeps_current_json_and_drops_upcast_json(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given AuditProgressed is at version 2, and v1 named its counter "pages_done"
    def v1_to_v2(raw: dict[str, object]) -> dict[str, object]:
        data = dict(raw["data"])  # type: ignore[call-overload]
        data["pages_crawled"] = data.pop("pages_done")
        return {**raw, "data": data, "schema_version": 2}

    monkeypatch.setitem(events.CURRENT_VERSION, "AuditProgressed", 2)
    monkeypatch.setattr(events, "UPCASTERS", {("AuditProgressed", 1): v1_to_v2})
    current = _progressed(2, pages_crawled=4)
    old = _progressed(1, pages_done=4)

    # when both are decoded
    event, body = decode_verbatim(current)
    upcast_event, upcast_body = decode_verbatim(old)

    # then the current JSON is kept as it was, the upcast one must be serialised again
    assert body is current
    assert upcast_body is None
    assert upcast_event == event
    assert event.data.pages_crawled == 4  # type: ignore[union-attr]
