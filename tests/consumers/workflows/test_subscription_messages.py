"""Reading a message of the Workflows event subscription: what it says, or what is wrong."""

from __future__ import annotations

import base64
import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest

from consumers.workflows.queues import QueueMessage
from consumers.workflows.subscription import Unreadable, read_report

BODY: dict[str, Any] = {
    "type": "cf.workflows.workflow.instance.errored",
    "source": {"type": "workflows.workflow", "workflowName": "site-audit"},
    "payload": {"versionId": "v1", "instanceId": "wf-123"},
    "metadata": {
        "accountId": "acc",
        "eventSubscriptionId": "sub-1",
        "eventSchemaVersion": 1,
        "eventTimestamp": "2026-12-06T02:48:57.132Z",
    },
}


def message(body: str, kind: str = "json", message_id: str = "m-1") -> QueueMessage:
    return QueueMessage(message_id, body, 1, "lease-1", 0.0, {"CF-Content-Type": kind})


def test_a_message_says_which_instance_of_which_workflow_changed_to_what_and_when() -> None:
    report = read_report(message(json.dumps(BODY)))

    assert (report.event, report.workflow, report.instance_id) == (
        "errored",
        "site-audit",
        "wf-123",
    )
    assert report.at == datetime(2026, 12, 6, 2, 48, 57, 132000, tzinfo=UTC)
    assert report.notice.message_id == "m-1"
    assert report.notice.event == BODY["type"] and report.notice.at == report.at


def test_the_same_content_under_another_message_id_is_the_same_report() -> None:
    one = read_report(message(json.dumps(BODY), message_id="m-1"))
    two = read_report(message(json.dumps(BODY), message_id="m-2"))
    assert one.key == two.key
    later = read_report(message(json.dumps({**BODY, "metadata": {**BODY["metadata"],
                                "eventTimestamp": "2026-12-06T02:48:58Z"}})))  # fmt: skip
    assert later.key != one.key


@pytest.mark.parametrize("kind", ["json", "bytes"])
def test_a_base64_body_is_read_as_cloudflare_describes_it(kind: str) -> None:
    encoded = base64.b64encode(json.dumps(BODY).encode()).decode()
    assert read_report(message(encoded, kind)).instance_id == "wf-123"


def test_a_text_body_holding_json_is_read() -> None:
    assert read_report(message(json.dumps(BODY), "text")).event == "errored"


def _without(part: str, name: str) -> dict[str, Any]:
    return {**BODY, part: {k: v for k, v in BODY[part].items() if k != name}}


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        (json.dumps({**BODY, "type": "cf.r2.object.created"}), "is not a Workflows instance event"),
        (json.dumps({**BODY, "type": "cf.workflows.workflow.instance.exploded"}),
         "unknown instance event 'exploded'"),
        (json.dumps(_without("payload", "instanceId")), "payload.instanceId is missing"),
        (json.dumps(_without("source", "workflowName")), "source.workflowName is missing"),
        (json.dumps(_without("metadata", "eventTimestamp")), "metadata.eventTimestamp is missing"),
        (json.dumps({**BODY, "metadata": {"eventTimestamp": "yesterday"}}), "is not a timestamp"),
        (json.dumps({**BODY, "metadata": {"eventTimestamp": "2026-12-06T02:48:57"}}), "no offset"),
    ],
)  # fmt: skip
def test_an_unreadable_message_names_what_is_wrong(body: str, why: str) -> None:
    with pytest.raises(Unreadable, match=why):
        read_report(message(body))


def test_a_bytes_body_that_is_not_base64_is_unreadable() -> None:
    with pytest.raises(Unreadable, match="not JSON"):
        read_report(message("%%% not base64 %%%", "bytes"))


def test_a_timestamp_out_of_any_sane_range_is_unreadable_not_an_error() -> None:
    body = {**BODY, "metadata": {**BODY["metadata"], "eventTimestamp": "0001-01-01T00:00:00Z"}}
    with pytest.raises(
        Unreadable, match=re.escape("metadata.eventTimestamp '0001-01-01T00:00:00Z'")
    ):
        read_report(message(json.dumps(body)))
