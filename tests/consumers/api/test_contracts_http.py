"""CloudEvents 1.0 at POST /events, sent by the official SDK (``cloudevents``) over real HTTP to
the API of a real serve: structured, batch and binary modes land as the same events as plain
envelopes, and an invalid CloudEvent is refused (422) naming the attribute at fault, with
nothing published. The AsyncAPI document is served at /asyncapi.json."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from cloudevents.core.bindings.http import to_binary, to_structured
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent

from consumers.operations.contracts.asyncapi import asyncapi_for
from consumers.workflows.simulator.server import SimulatorServer
from tests.consumers.api.conftest import LiveServer, server_settings, wait_for

BATCH = "application/cloudevents-batch+json"


@pytest.fixture(scope="module")
def live(
    tmp_path_factory: pytest.TempPathFactory, _simulator_server: SimulatorServer
) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("cloudevents")
    with LiveServer(["api", "projector"], **server_settings(tmp, _simulator_server)) as server:
        yield server


@pytest.fixture
def client(live: LiveServer) -> Iterator[httpx.Client]:
    with live.client() as c:
        yield c


def audit() -> str:
    return f"ce-{uuid.uuid4().hex[:10]}"


def event(kind: str, subject: str, data: dict[str, Any] | None, **attributes: Any) -> CloudEvent:
    return CloudEvent(
        attributes={
            "type": kind,
            "source": "crawler",
            "subject": subject,
            "datacontenttype": "application/json",
            **attributes,
        },
        data=data,
    )


def post(client: httpx.Client, headers: dict[str, str], body: bytes) -> httpx.Response:
    return client.post("/events", headers=headers, content=body)


def structured(client: httpx.Client, ce: CloudEvent) -> httpx.Response:
    message = to_structured(ce, JSONFormat())
    return post(client, dict(message.headers), message.body)


def binary(client: httpx.Client, ce: CloudEvent) -> httpx.Response:
    message = to_binary(ce, JSONFormat())
    return post(client, dict(message.headers), message.body)


def batch(client: httpx.Client, *events: CloudEvent) -> httpx.Response:
    body = b"[" + b",".join(JSONFormat().write(e) for e in events) + b"]"
    return post(client, {"content-type": BATCH}, body)


def history(client: httpx.Client, audit_id: str) -> list[dict[str, Any]]:
    response = client.get(f"/audits/{audit_id}/events")
    assert response.status_code == 200, response.text
    steps: list[dict[str, Any]] = response.json()["events"]
    return steps


def test_each_mode_lands_as_the_events_it_carries(client: httpx.Client) -> None:
    a = audit()
    started = event(
        "AuditStarted",
        a,
        {"project_id": "p-1", "workflow_instance_id": f"wf-{a}"},
        time=datetime.fromisoformat("2026-11-30T08:00:00+00:00"),
    )
    progressed = event(
        "dev.auditrec.AuditProgressed",
        a,
        {"current_phase": "crawl", "pages_crawled": 40},
        time=datetime.fromisoformat("2026-11-30T08:05:00+00:00"),
    )
    attached = event(
        "WorkflowInstanceAttached",
        a,
        {"workflow_instance_id": f"wf2-{a}"},
        time=datetime.fromisoformat("2026-11-30T08:06:00+00:00"),
    )
    completed = event(
        "AuditCompleted",
        a,
        {"pages_crawled": 250},
        time=datetime.fromisoformat("2026-11-30T08:10:00+00:00"),
    )
    answers = [
        structured(client, started),
        binary(client, progressed),
        batch(client, attached, completed),
    ]
    assert [r.status_code for r in answers] == [202, 202, 202], [r.text for r in answers]
    ids = [i for r in answers for i in r.json()["event_ids"]]
    sent = [started, progressed, attached, completed]
    assert ids == [e.get_id() for e in sent]  # the SDK's ids are UUIDs: kept as they are

    row = wait_for(client, a, lambda r: r["status"] == "completed")
    assert row["workflow_instance_id"] == f"wf2-{a}"
    assert row["pages_crawled"] == 250 and row["project_id"] == "p-1"
    steps = history(client, a)
    assert [s["type"] for s in steps] == [
        "AuditStarted",
        "AuditProgressed",
        "WorkflowInstanceAttached",
        "AuditCompleted",
    ]
    assert {s["producer"] for s in steps} == {"crawler"}
    assert steps[0]["occurred_at"].startswith("2026-11-30T08:00:00")
    assert steps[1]["data"]["pages_crawled"] == 40


def test_an_id_that_is_not_a_uuid_gives_one_event_id_per_source_and_id(
    client: httpx.Client,
) -> None:
    a = audit()
    first = structured(client, event("AuditStarted", a, {"project_id": "p"}, id="order-17"))
    again = structured(client, event("AuditStarted", a, {"project_id": "p"}, id="order-17"))
    other = structured(
        client, event("AuditStarted", a, {"project_id": "p"}, id="order-17", source="billing")
    )
    assert first.status_code == again.status_code == other.status_code == 202
    assert first.json()["event_ids"] == again.json()["event_ids"]
    assert first.json()["event_ids"] != other.json()["event_ids"]
    uuid.UUID(first.json()["event_ids"][0])


def test_extensions_carry_causation_and_correlation(client: httpx.Client) -> None:
    a = audit()
    cause, flow = str(uuid.uuid4()), str(uuid.uuid4())
    answer = binary(
        client,
        event("AuditStarted", a, {"project_id": "p"}, causationid=cause, correlationid=flow),
    )
    assert answer.status_code == 202, answer.text
    wait_for(client, a)
    assert history(client, a)[0]["causation_id"] == cause


def _structured_body(**attributes: Any) -> bytes:
    body = {
        "specversion": "1.0",
        "id": str(uuid.uuid4()),
        "source": "crawler",
        "type": "AuditStarted",
        "subject": audit(),
        "data": {"project_id": "p"},
    }
    body.update(attributes)
    return json.dumps({k: v for k, v in body.items() if v is not None}).encode()


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (_structured_body(subject=None), "item 0: subject: required: the audit id"),
        (_structured_body(specversion="0.3"), "item 0: specversion: must be '1.0' (got '0.3')"),
        (
            _structured_body(id=None, source=None),
            "item 0: id: required CloudEvents attribute missing; source: required",
        ),
        (
            _structured_body(type="com.example.Other"),
            "item 0: type: unknown event type 'com.example.Other'",
        ),
        (
            _structured_body(type="ProbeRequested"),
            "item 0: type: ProbeRequested is written by auditrec only",
        ),
        (_structured_body(subject="a b"), "item 0: subject: must be 1-128 characters"),
        (_structured_body(source="s" * 200), "item 0: source: String should have at most 128"),
        (
            _structured_body(time="2026-11-30T08:00:00"),
            "item 0: time: Input should have timezone info",
        ),
        (
            _structured_body(data=None, data_base64="aGk="),
            "item 0: data_base64: binary data is not accepted",
        ),
        (
            _structured_body(data={"project_id": "p", "colour": "red"}),
            "item 0: data.colour: Extra inputs are not permitted",
        ),
        (_structured_body(datacontenttype="text/plain"), "item 0: datacontenttype: must be JSON"),
        (b"[1]", "body: not valid"),
    ],
)
def test_an_invalid_structured_cloudevent_is_refused_naming_the_attribute(
    client: httpx.Client, body: bytes, problem: str
) -> None:
    content_type = {"content-type": "application/cloudevents+json"}
    if body == b"[1]":  # a batch sent as one event
        answer = post(client, content_type, body)
        assert answer.status_code == 422
        assert "item 0: expected a JSON object (a CloudEvent)" in answer.json()["detail"]
        return
    answer = post(client, content_type, body)
    # (a type only auditrec writes is well-formed, but not the sender's to send: 403)
    refused = "written by auditrec only" in problem
    assert answer.status_code == (403 if refused else 422), answer.text
    detail = answer.json()["detail"]
    assert any(line.startswith(problem) for line in detail), detail


def test_a_batch_with_one_invalid_event_publishes_nothing(
    client: httpx.Client, live: LiveServer
) -> None:
    a = audit()
    good = event("AuditStarted", a, {"project_id": "p"})
    bad = event("AuditProgressed", a, {"pages_crawled": -1})
    answer = batch(client, good, bad)
    assert answer.status_code == 422
    assert answer.json()["detail"] == [
        "item 1: data.pages_crawled: Input should be greater than or equal to 0"
    ]
    nothing = client.get(f"/audits/{a}/events")
    assert nothing.status_code == 404, nothing.text  # no event of the audit was published
    not_a_batch = post(client, {"content-type": BATCH}, JSONFormat().write(good))
    assert not_a_batch.status_code == 422
    assert not_a_batch.json()["detail"] == ["body: a CloudEvents batch is a JSON array"]


def test_invalid_binary_cloudevents_are_refused(client: httpx.Client) -> None:
    headers = {
        "ce-specversion": "1.0",
        "ce-id": str(uuid.uuid4()),
        "ce-source": "crawler",
        "ce-type": "AuditStarted",
        "content-type": "application/json",
    }
    no_subject = post(client, headers, b'{"project_id": "p"}')
    assert no_subject.status_code == 422
    assert no_subject.json()["detail"] == ["item 0: subject: required: the audit id"]
    with_subject = {**headers, "ce-subject": audit()}
    not_json = post(client, with_subject, b"{project")
    assert not_json.status_code == 422
    assert "body: not valid JSON" in not_json.json()["detail"][0]
    text = post(client, {**with_subject, "content-type": "text/plain"}, b"hello")
    assert text.status_code == 422
    assert text.json()["detail"][0].startswith("item 0: datacontenttype: must be JSON")


def test_asyncapi_json_is_the_deployments_document(live: LiveServer, client: httpx.Client) -> None:
    answer = client.get("/asyncapi.json")
    assert answer.status_code == 200
    assert live.settings is not None
    assert answer.json() == json.loads(json.dumps(asyncapi_for(live.settings)))
    prefix = live.settings.topic_prefix
    assert answer.json()["channels"]["lifecycle"]["address"] == f"{prefix}.lifecycle.v1"


def test_asyncapi_json_is_behind_the_token_like_openapi(
    tmp_path: Path, simulator: SimulatorServer
) -> None:
    settings = server_settings(tmp_path, simulator, api_tokens="s3cret-0123456789")
    with LiveServer(["api"], **settings) as live, live.client() as client:
        assert client.get("/asyncapi.json").status_code == 401
        authorised = client.get(
            "/asyncapi.json", headers={"Authorization": "Bearer s3cret-0123456789"}
        )
        assert authorised.status_code == 200
        assert authorised.json()["asyncapi"].startswith("3.")
