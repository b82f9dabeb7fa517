"""``(audit_id, event_id)`` is an idempotency key, on a real ``serve`` (API and projector):
an event id reused under another audit is another event, applied (it was dropped without a
word); a batch that repeats an event is accepted and applies it once (it was refused whole),
over HTTP and through ``auditrec publish``; a key given other content is a 409 naming the id
where the API sees the first (the batch, the history), else dead-lettered
``event_id_conflict`` by the projector."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from consumers.workflows.simulator.server import SimulatorServer
from tests.cli import run
from tests.consumers.api.conftest import JSON, LiveServer, envelope, server_settings
from tests.eventually import eventually_sync

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def serve(
    tmp_path_factory: pytest.TempPathFactory, _simulator_server: SimulatorServer
) -> Iterator[LiveServer]:
    """``serve --only api,projector`` on the embedded backends, no tokens, on loopback."""
    settings = server_settings(tmp_path_factory.mktemp("idempotency"), _simulator_server)
    with LiveServer(["api", "projector"], **settings) as server:
        yield server


def start(audit_id: str, event_id: str, *, at: datetime = T0, **data: Any) -> dict[str, Any]:
    return envelope(
        "AuditStarted",
        audit_id,
        {"project_id": "p-1", **data},
        at=at,
        event_id=event_id,
    )


def step(audit_id: str, event_id: str, pages: int, *, at: datetime = T0) -> dict[str, Any]:
    return envelope("AuditProgressed", audit_id, {"pages_crawled": pages}, at=at, event_id=event_id)


def history(client: httpx.Client, audit_id: str) -> list[dict[str, Any]]:
    answer = client.get(f"/audits/{audit_id}/events")
    assert answer.status_code == 200, answer.text
    events: list[dict[str, Any]] = answer.json()["events"]
    return events


def audit() -> str:
    return f"a-{uuid.uuid4().hex[:10]}"


def test_an_event_id_reused_under_another_audit_is_applied(serve: LiveServer) -> None:
    # given an audit started with an event id
    shared, first, second = str(uuid.uuid4()), audit(), audit()
    with serve.client() as client:
        assert client.post("/events", json=start(first, shared), headers=JSON).status_code == 202
        assert len(history(client, first)) == 1

        # when another audit's start comes with the same event id
        answer = client.post("/events", json=start(second, shared), headers=JSON)

        # then it is accepted and applied: the second audit exists with its own history
        assert answer.status_code == 202, answer.text
        events = history(client, second)
        assert [(e["type"], e["event_id"]) for e in events] == [("AuditStarted", shared)]
        assert client.get(f"/audits/{second}").json()["status"] == "running"
        assert len(history(client, first)) == 1


def test_a_batch_repeating_an_event_with_a_new_time_is_accepted_and_applies_it_once(
    serve: LiveServer,
) -> None:
    # given a batch whose step comes twice: the second rebuilt by a retry, a minute later
    audit_id, step_id = audit(), str(uuid.uuid4())
    batch = [
        start(audit_id, str(uuid.uuid4())),
        step(audit_id, step_id, 3),
        {**step(audit_id, step_id, 3, at=T0 + timedelta(minutes=1)), "producer": "retry"},
    ]
    with serve.client() as client:
        # when it is posted
        answer = client.post("/events", json=batch, headers=JSON)

        # then it is accepted, the step published and applied once
        assert answer.status_code == 202, answer.text
        assert answer.json()["accepted"] == 2
        events = history(client, audit_id)
        assert [e["event_id"] for e in events].count(step_id) == 1
        assert len(events) == 2

        # and the same step posted once more later is accepted and changes nothing
        again = client.post("/events", json=batch[2], headers=JSON)
        assert again.status_code == 202, again.text
        row = client.get(f"/audits/{audit_id}").json()
        assert (row["version"], row["pages_crawled"]) == (2, 3)


def test_a_key_given_other_data_in_the_batch_is_409_naming_it(serve: LiveServer) -> None:
    audit_id, step_id = audit(), str(uuid.uuid4())
    batch = [
        start(audit_id, str(uuid.uuid4())),
        step(audit_id, step_id, 3),
        step(audit_id, step_id, 4),
    ]
    with serve.client() as client:
        answer = client.post("/events", json=batch, headers=JSON)

        assert answer.status_code == 409, answer.text
        (problem,) = answer.json()["detail"]
        assert problem.startswith("item 2: ") and step_id in problem and audit_id in problem
        assert "item 1" in problem
        # and nothing of the batch was published
        assert client.get(f"/audits/{audit_id}").status_code == 404


def test_a_key_given_another_type_than_its_history_is_409_naming_it(serve: LiveServer) -> None:
    # given an audit's start applied
    audit_id, start_id = audit(), str(uuid.uuid4())
    with serve.client() as client:
        assert (
            client.post("/events", json=start(audit_id, start_id), headers=JSON).status_code == 202
        )
        assert len(history(client, audit_id)) == 1

        # when a completion comes under the start's event id
        clash = envelope("AuditCompleted", audit_id, {}, event_id=start_id)
        answer = client.post("/events", json=clash, headers=JSON)

        # then it is refused naming the id, and the audit still runs
        assert answer.status_code == 409, answer.text
        (problem,) = answer.json()["detail"]
        assert start_id in problem and audit_id in problem and "AuditStarted" in problem
        assert client.get(f"/audits/{audit_id}").json()["status"] == "running"


def test_publish_applies_a_repeated_line_once_and_the_projector_dead_letters_a_conflict(
    serve: LiveServer, tmp_path: Path
) -> None:
    # given a file whose step is repeated (a new time), then given other data further on
    assert serve.settings is not None
    audit_id, step_id = audit(), str(uuid.uuid4())
    lines = [
        start(audit_id, str(uuid.uuid4())),
        step(audit_id, step_id, 3),
        step(audit_id, step_id, 3, at=T0 + timedelta(seconds=30)),
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    env = {
        "AUDITREC_EVENT_LOG_URL": serve.settings.event_log_url,
        "AUDITREC_DATABASE_URL": serve.settings.database_url,
        "AUDITREC_TOPIC_PREFIX": serve.settings.topic_prefix,
    }

    # when it is published, then a line giving the step other data (the CLI does not read
    # the history: the projector judges it)
    published = run("publish", str(path), "--json", env=env)
    clash = tmp_path / "clash.jsonl"
    clash.write_text(json.dumps(step(audit_id, step_id, 99)) + "\n")
    refused = run("publish", str(clash), "--json", env=env)

    # then the file is published with its step once, the clash published too ...
    assert published.returncode == 0, published.stderr
    assert json.loads(published.stdout)["published"] == 2
    assert refused.returncode == 0, refused.stderr
    with serve.client() as client:
        # ... the step applied once, the clash dead-lettered with the reason, never applied
        letters = eventually_sync(
            lambda: [
                d
                for d in client.get("/dead-letters", params={"limit": 200}).json()["dead_letters"]
                if step_id in d["reason"]
            ],
            message="the conflict to be dead-lettered",
        )
        assert [d["reason"].split(":")[0] for d in letters] == ["event_id_conflict"]
        assert audit_id in letters[0]["reason"] and letters[0]["consumer"].endswith("projector")
        events = history(client, audit_id)
        assert [e["event_id"] for e in events].count(step_id) == 1
        assert client.get(f"/audits/{audit_id}").json()["pages_crawled"] == 3


def test_publish_refuses_a_file_giving_an_event_id_other_data_naming_the_lines(
    serve: LiveServer, tmp_path: Path
) -> None:
    assert serve.settings is not None
    audit_id, step_id = audit(), str(uuid.uuid4())
    path = tmp_path / "clash.jsonl"
    lines = [
        start(audit_id, str(uuid.uuid4())),
        step(audit_id, step_id, 3),
        step(audit_id, step_id, 4),
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    env = {
        "AUDITREC_EVENT_LOG_URL": serve.settings.event_log_url,
        "AUDITREC_DATABASE_URL": serve.settings.database_url,
        "AUDITREC_TOPIC_PREFIX": serve.settings.topic_prefix,
    }

    refused = run("publish", str(path), env=env)

    assert refused.returncode == 2
    said = refused.stdout + refused.stderr
    assert "line 3: " in said and step_id in said and "(line 2)" in said
    assert "nothing published" in said
    with serve.client() as client:
        assert client.get(f"/audits/{audit_id}").status_code == 404
