"""Inputs at the edges that must neither stop a consumer nor be accepted where they forge."""

from __future__ import annotations

import json

import pytest

from consumers.eventlog import DEAD_LETTER_ORIGINAL_MAX, Record, Topics, dead_letter
from consumers.publishing import validate_items
from consumers.simulator import SimulatorServer
from consumers.workflows import ProbeFailure, WorkflowsClient
from projections.errors import InvalidInput


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


def test_failures_reported_by_the_workflow_or_an_operator_are_accepted() -> None:
    items = [
        {
            "type": "AuditFailed",
            "audit_id": "a-1",
            "data": {"error_code": "oom", "error_detail": "x", "failed_by": by},
        }
        for by in ("workflow", "operator")
    ]
    assert [e.data.failed_by.value for e in validate_items(items)] == ["workflow", "operator"]  # type: ignore[union-attr]


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
