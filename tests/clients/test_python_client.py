"""The Python client against a real ``auditrec serve``: publish, status, audits, replay, with a
bearer token; retries across a dropped connection and a refusal never duplicate an event."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta

import pytest

from auditrec_client import (
    AsyncAuditrecClient,
    AuditCompleted,
    AuditFailed,
    AuditProgressed,
    AuditrecClient,
    AuditStarted,
    Forbidden,
    InvalidEvents,
    NotFound,
    Retry,
    Unauthorized,
    Unavailable,
    Unreachable,
    WorkflowInstanceAttached,
)
from tests.clients.conftest import VIEWER, Serve, audit_id
from tests.clients.proxy import FaultyProxy

FAST = Retry(attempts=4, backoff=0.05, max_backoff=0.2)


def _types(history: dict[str, object]) -> list[str]:
    return [e["type"] for e in history["events"]]  # type: ignore[attr-defined,index]


def test_publish_then_read_status_audits_and_replay(serve: Serve) -> None:
    a = audit_id()
    started = datetime.now(UTC) - timedelta(minutes=2)
    with AuditrecClient(serve.url, token=serve.token, producer="crawler", retry=FAST) as client:
        # when an audit's lifecycle is published, one event per call and two in one call
        ids = [
            *client.publish(
                AuditStarted(audit_id=a, project_id="p-client", occurred_at=started, pages_total=4)
            ),
            *client.publish(
                WorkflowInstanceAttached(audit_id=a, workflow_instance_id=f"wf-{a}"),
                AuditProgressed(audit_id=a, current_phase="crawl", pages_crawled=2),
            ),
            *client.publish(AuditCompleted(audit_id=a, pages_crawled=4)),
        ]

        # then the row, the listing and the history say so
        row = client.status(a)
        page = client.audits(status="completed", project_id="p-client", limit=1000)
        history = client.replay(a)

    assert row["status"] == "completed" and row["pages_crawled"] == 4
    assert row["workflow_instance_id"] == f"wf-{a}" and row["version"] == 4
    assert a in [r["audit_id"] for r in page.audits]
    assert _types(history) == [
        "AuditStarted",
        "WorkflowInstanceAttached",
        "AuditProgressed",
        "AuditCompleted",
    ]
    assert [e["event_id"] for e in history["events"]] == ids
    assert {e["producer"] for e in history["events"]} == {"crawler"}


def test_a_failure_published_by_the_workflow_fails_the_audit(serve: Serve) -> None:
    a = audit_id()
    with AuditrecClient(serve.url, token=serve.token, producer="crawler", retry=FAST) as client:
        client.publish(
            AuditStarted(audit_id=a, project_id="p"),
            AuditFailed(audit_id=a, error_code="oom", error_detail="Worker exceeded memory limit"),
        )
        row = client.status(a, probe=False)
    assert (row["status"], row["error_code"], row["failed_by"]) == ("failed", "oom", "workflow")


def test_a_publish_retried_after_a_dropped_connection_is_recorded_once(
    serve: Serve, proxy: FaultyProxy
) -> None:
    # given a proxy that cuts the next connection after the server has handled the request
    a = audit_id()
    proxy.drop(1)
    with AuditrecClient(proxy.url, token=serve.token, producer="crawler", retry=FAST) as client:
        # when an event is published through it
        [event_id] = client.publish(AuditStarted(audit_id=a, project_id="p"))
        history = client.replay(a)
        row = client.status(a, probe=False)

    # then the first attempt was accepted, its answer lost, and the retry recorded nothing twice
    assert len(proxy.dropped) == 1 and proxy.dropped[0].startswith(b"HTTP/1.1 202")
    assert [e["event_id"] for e in history["events"]] == [event_id]
    assert row["version"] == 1


async def test_the_async_client_retries_a_drop_and_a_refusal_without_a_duplicate(
    serve: Serve, proxy: FaultyProxy
) -> None:
    a = audit_id()
    proxy.refuse(1, status=503)
    proxy.drop(1)
    async with AsyncAuditrecClient(
        proxy.url, token=serve.token, producer="crawler", retry=FAST
    ) as client:
        ids = await client.publish(
            AuditStarted(audit_id=a, project_id="p"),
            AuditProgressed(audit_id=a, pages_crawled=1),
        )
        history = await client.replay(a)
        page = await client.audits(project_id="p", status="running", limit=1000)
        row = await client.status(a, probe=False)

    assert proxy.refused == 1 and len(proxy.dropped) == 1
    assert [e["event_id"] for e in history["events"]] == ids
    assert a in [r["audit_id"] for r in page.audits]
    assert (row["status"], row["pages_crawled"], row["version"]) == ("running", 1, 2)


def test_refusals_beyond_the_attempts_raise_unavailable(serve: Serve, proxy: FaultyProxy) -> None:
    proxy.refuse(3, status=429)
    once = Retry(attempts=3, backoff=0)
    with (
        AuditrecClient(proxy.url, token=serve.token, retry=once) as c,
        pytest.raises(Unavailable) as raised,
    ):
        c.publish(AuditStarted(audit_id=audit_id(), project_id="p"))
    assert raised.value.status == 429 and raised.value.retriable
    assert proxy.refused == 3


def test_an_invalid_event_is_refused_naming_it_and_not_retried(
    serve: Serve, proxy: FaultyProxy
) -> None:
    a = audit_id()
    with AuditrecClient(proxy.url, token=serve.token, retry=FAST) as client:
        with pytest.raises(InvalidEvents) as raised:
            client.publish(
                AuditStarted(audit_id=a, project_id="p"),
                {"type": "AuditProgressed", "audit_id": a, "data": {"pages_crawled": "many"}},
            )
        with pytest.raises(NotFound):
            client.status(a, probe=False)
    assert raised.value.status == 422 and not raised.value.retriable
    assert any(p.startswith("item 1: ") and "pages_crawled" in p for p in raised.value.problems)


def test_without_the_token_the_server_refuses(serve: Serve) -> None:
    with AuditrecClient(serve.url, retry=FAST) as client, pytest.raises(Unauthorized) as raised:
        client.audits()
    assert raised.value.status == 401


def test_a_token_without_the_scope_is_forbidden_naming_the_scope_it_lacks(serve: Serve) -> None:
    with AuditrecClient(serve.url, token=VIEWER, retry=FAST) as client:
        assert isinstance(client.audits().audits, list)  # read: allowed
        with pytest.raises(Forbidden) as raised:
            client.publish(AuditStarted(audit_id=audit_id(), project_id="p"))
    error = raised.value
    assert error.status == 403 and not error.retriable
    assert not isinstance(error, Unauthorized)
    assert error.needed_scope == "publish"
    assert str(error).startswith(
        "auditrec answered 403 forbidden (the token lacks scope publish): "
    )
    assert "'viewer' has scope read" in str(error)


def test_nothing_listening_raises_unreachable_after_the_attempts() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    twice = Retry(attempts=2, backoff=0)
    client = AuditrecClient(f"http://127.0.0.1:{port}", retry=twice)
    with client, pytest.raises(Unreachable, match="no answer after 2 attempt") as raised:
        client.publish(AuditStarted(audit_id="a-1", project_id="p"))
    assert raised.value.retriable
