"""CloudEvents round trip: the official SDK (``cloudevents``) as the client of a real
``auditrec serve``, in structured, binary and batch modes, gives the same history
(``GET /audits/{id}/events`` and ``auditrec replay``) as the same events sent as plain
envelopes, on both backend pairs."""

from __future__ import annotations

import json
import subprocess
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from cloudevents.core.bindings.http import to_binary, to_structured
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent

from consumers.workflows.simulator.server import SimulatorServer
from tests.conftest import Backend
from tests.e2e.serving import AUDITREC, serve
from tests.eventually import eventually_sync


@pytest.fixture
def env(backend: Backend, simulator: SimulatorServer) -> dict[str, str]:
    return backend.environ(
        AUDITREC_CLOUDFLARE_API_URL=simulator.url,
        AUDITREC_CLOUDFLARE_ACCOUNT_ID="acct-1",
        AUDITREC_LOG_FORMAT="json",
    )


def lifecycle(start: datetime) -> list[tuple[str, datetime, dict[str, Any]]]:
    """One audit's events: (type, when, data); the instance id is filled in per audit."""
    return [
        ("AuditStarted", start, {"project_id": "p-1", "start_url": "https://example.com/"}),
        ("WorkflowInstanceAttached", start + timedelta(seconds=5), {}),
        ("AuditProgressed", start + timedelta(minutes=3), {"current_phase": "crawl"}),
        ("AuditProgressed", start + timedelta(minutes=6), {"pages_crawled": 120}),
        ("AuditCompleted", start + timedelta(minutes=9), {"pages_crawled": 250}),
    ]


def data_for(kind: str, audit_id: str, data: dict[str, Any]) -> dict[str, Any]:
    return (
        {**data, "workflow_instance_id": f"wf-{audit_id}"} if kind.startswith("Workflow") else data
    )


def plain(client: httpx.Client, audit_id: str, start: datetime) -> None:
    body = [
        {
            "type": kind,
            "audit_id": audit_id,
            "occurred_at": at.isoformat(),
            "producer": "crawler",
            "data": data_for(kind, audit_id, data),
        }
        for kind, at, data in lifecycle(start)
    ]
    answer = client.post("/events", json=body)
    assert answer.status_code == 202, answer.text


def cloudevents(client: httpx.Client, audit_id: str, start: datetime) -> list[str]:
    """The same events as CloudEvents: the first structured, the next binary (with the
    reverse-DNS type), the rest in one batch. Returns the ids the SDK gave them."""
    events = [
        CloudEvent(
            attributes={
                "type": kind if i % 2 == 0 else f"dev.auditrec.{kind}",
                "source": "crawler",
                "subject": audit_id,
                "time": at,
                "datacontenttype": "application/json",
            },
            data=data_for(kind, audit_id, data),
        )
        for i, (kind, at, data) in enumerate(lifecycle(start))
    ]
    first = to_structured(events[0], JSONFormat())
    second = to_binary(events[1], JSONFormat())
    rest = b"[" + b",".join(JSONFormat().write(e) for e in events[2:]) + b"]"
    answers = [
        client.post("/events", headers=dict(first.headers), content=first.body),
        client.post("/events", headers=dict(second.headers), content=second.body),
        client.post(
            "/events",
            headers={"content-type": "application/cloudevents-batch+json"},
            content=rest,
        ),
    ]
    assert [a.status_code for a in answers] == [202, 202, 202], [a.text for a in answers]
    return [i for a in answers for i in a.json()["event_ids"]]


def comparable(steps: list[dict[str, Any]], audit_id: str) -> list[dict[str, Any]]:
    """A history without what differs by construction: ids, log positions, the audit id."""
    text = json.dumps(steps).replace(audit_id, "<audit>")
    return [
        {k: v for k, v in step.items() if k not in ("event_id", "position", "causation_id")}
        for step in json.loads(text)
    ]


def test_cloudevents_give_the_same_history_as_plain_envelopes(
    env: dict[str, str], tmp_path: Path
) -> None:
    # given a serve running the API and the pipeline, and one audit's events sent twice:
    # as plain envelopes for one audit, as CloudEvents through the SDK for another
    start = (datetime.now(UTC) - timedelta(minutes=20)).replace(microsecond=0)
    suffix = uuid.uuid4().hex[:8]
    by_plain, by_ce = f"plain-{suffix}", f"ce-{suffix}"
    with (
        serve(env, tmp_path / "serve.log", "api", "projector", "reconciler") as url,
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        plain(client, by_plain, start)
        ids = cloudevents(client, by_ce, start)

        def histories() -> list[list[dict[str, Any]]]:
            return [client.get(f"/audits/{a}/events").json() for a in (by_plain, by_ce)]

        # then both audits complete, and their histories are the same, step for step
        done = eventually_sync(
            histories,
            until=lambda hs: (
                all(h.get("status") == "completed" for h in hs)
                and all(len(h["events"]) == 5 for h in hs)
            ),
            timeout=60,
            message="both audits to complete",
        )
    expected, received = (
        comparable(h["events"], a) for h, a in zip(done, (by_plain, by_ce), strict=True)
    )
    assert received == expected
    assert [s["type"] for s in received] == [k for k, _, _ in lifecycle(start)]
    assert [s["event_id"] for s in done[1]["events"]] == ids
    assert {s["producer"] for s in received} == {"crawler"}

    # and auditrec replay tells the same story for both
    replays = []
    for audit_id in (by_plain, by_ce):
        replay = subprocess.run(
            [AUDITREC, "replay", audit_id, "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert replay.returncode == 0, replay.stderr
        replays.append(json.loads(replay.stdout.replace(audit_id, "<audit>")))
    assert _without_ids(replays[0]) == _without_ids(replays[1])
    assert "completed" in json.dumps(replays[1]) and "crawl" in json.dumps(replays[1])


def _without_ids(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: _without_ids(v)
            for k, v in node.items()
            if k not in ("event_id", "position", "causation_id", "offset", "partition")
        }
    if isinstance(node, list):
        return [_without_ids(v) for v in node]
    return node
