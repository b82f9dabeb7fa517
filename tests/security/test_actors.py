"""Who acted, and what may come in from outside, against a real serve: the actor is who
authenticated (a body claiming another is refused, 403 naming both; a person acted for is
``on_behalf_of``, and the command line's ``--operator ops`` is ``cli:<os user>`` acting for
``ops``, never the token named ops); no token, whatever its scope, publishes an observation,
a decision, a release or a restoration; a dead-letter replay with a forged body is refused;
and what a publisher writes to Kafka goes through the ingest topic, where a decision is
dead-lettered and never reaches the lifecycle log."""

from __future__ import annotations

import asyncio
import getpass
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaProducer

from consumers.eventlog.port import OutRecord
from consumers.workflows.simulator.server import SimulatorServer
from tests.cli import run, run_process
from tests.conftest import Backend
from tests.consumers.api.conftest import (
    JSON,
    LiveServer,
    envelope,
    publish,
    server_settings,
    started,
    unique,
    wait_for,
)
from tests.eventually import eventually_sync

OPS, CI = "tok-op-0123456789", "tok-pub-0123456789"
TOKENS = f"ops:{OPS}:operate,ci:{CI}:publish"
HELD = "3e2d1c0b-9a8f-4e7d-8c6b-5a4f3e2d1c0b"


@pytest.fixture
def live(backend: Backend, tmp_path: Path, simulator: SimulatorServer) -> Iterator[LiveServer]:
    settings = server_settings(
        tmp_path,
        simulator,
        event_log_url=backend.event_log_url,
        database_url=backend.database_url,
        topic_prefix=backend.topic_prefix,
        api_tokens=TOKENS,
    )
    with LiveServer(["projector", "reconciler", "ingest", "api"], **settings) as server:
        yield server


def _type_of(value: bytes) -> str:
    try:
        return str(json.loads(value).get("type"))
    except ValueError:
        return "(not JSON)"


def lifecycle_types(live: LiveServer) -> list[str]:
    """Every event type on the lifecycle topic, as the log holds them."""
    assert live.backends is not None
    log = live.backends.log

    async def read() -> list[str]:
        found: list[str] = []
        for partition in await log.inspection.partitions(log.topics.lifecycle):
            async for batch in log.inspection.read(log.topics.lifecycle, partition, 0):
                found.extend(_type_of(r.value) for r in batch)
        return found

    return live.call(read)


def forged(audit_id: str) -> dict[str, dict[str, Any]]:
    """What only auditrec writes, as a body would claim it."""
    return {
        "WorkflowStatusObserved": envelope(
            "WorkflowStatusObserved",
            audit_id,
            {"status": "errored", "trigger": "watchdog", "observed_at": "2026-12-01T00:00:00Z"},
        ),
        "AuditFailureReleased": envelope(
            "AuditFailureReleased", audit_id, {"held_id": HELD, "actor": "token:ops"}
        ),
        "AuditRestored": envelope(
            "AuditRestored",
            audit_id,
            {
                "reason": "forged",
                "actor": "cli:alice",
                "failure_id": HELD,
                "failed_by": "reconciler",
                "error_code": "oom",
                "resume": {"project_id": "p-1"},
            },
        ),
        "failed_by 'reconciler'": envelope(
            "AuditFailed",
            audit_id,
            {"error_code": "oom", "error_detail": "forged", "failed_by": "reconciler"},
        ),
        "failed_by 'operator'": envelope(
            "AuditFailed",
            audit_id,
            {
                "error_code": "oom",
                "error_detail": "forged",
                "failed_by": "operator",
                "actor": "cli:alice",
            },
        ),
    }


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_body_claiming_another_actor_is_refused_naming_both(live: LiveServer) -> None:
    audit_id = unique("claimed")
    with live.client(OPS) as ops:
        publish(ops, started(audit_id))
        wait_for(ops, audit_id)
        # an operator action whose body names someone else
        claimed = ops.post(
            f"/audits/{audit_id}/fail",
            json={"code": "oom", "reason": "r", "actor": "cli:alice"},
        )
        # an event whose data names someone else (a workflow's failure, otherwise fine)
        failure = envelope(
            "AuditFailed",
            audit_id,
            {"error_code": "oom", "error_detail": "x", "failed_by": "workflow", "actor": "ops"},
        )
        posted = ops.post("/events", json=[failure])
        row = wait_for(ops, audit_id)

    assert claimed.status_code == 403, claimed.text
    assert "'cli:alice'" in claimed.json()["detail"][0]
    assert "'token:ops'" in claimed.json()["detail"][0]
    assert posted.status_code == 403, posted.text
    (problem,) = posted.json()["detail"]
    assert problem.startswith("item 0: data.actor: 'ops' is not who authenticated ('token:ops')")
    assert row["status"] == "running"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_actor_is_the_token_and_the_person_named_is_on_behalf_of(live: LiveServer) -> None:
    audit_id = unique("behalf")
    with live.client(OPS) as ops:
        publish(ops, started(audit_id))
        wait_for(ops, audit_id)
        done = ops.post(
            f"/audits/{audit_id}/fail",
            json={"code": "oom", "reason": "r", "actor": "token:ops", "on_behalf_of": "alice"},
        )
        wait_for(ops, audit_id, lambda r: r["status"] == "failed")
        history = ops.get(f"/audits/{audit_id}/events").json()["events"]

        metrics = ops.get("/metrics").text

    assert done.status_code == 200, done.text
    assert (done.json()["actor"], done.json()["on_behalf_of"]) == ("token:ops", "alice")
    # the metric counts the action under who authenticated, never the person named
    assert re.search(
        r'^auditrec_operator_actions_total\{action="fail",actor="token:ops"\} [1-9]', metrics, re.M
    ), metrics
    assert 'actor="alice"' not in metrics
    failure = history[-1]
    assert (failure["data"]["actor"], failure["data"]["on_behalf_of"]) == ("token:ops", "alice")
    assert "by operator token:ops on behalf of alice" in failure["reason"]


def dressed(audit_id: str) -> dict[str, dict[str, Any]]:
    """A publisher's events dressed up as auditrec's, by what the refusal names: a workflow's
    failure carrying a reconciler decision's fields, one naming a producer of auditrec's own,
    one naming an actor who did not authenticate."""
    failure = {"error_code": "oom", "error_detail": "dressed", "failed_by": "workflow"}
    extra: dict[str, Any] = {
        "data.rule": {"rule": "errored"},
        "data.reconciled_by": {"reconciled_by": "watchdog"},
        "data.workflow_status": {"workflow_status": "errored"},
        "data.policy": {"policy": {"stale_running_after_s": 900}},
        "data.actor: 'token:someone'": {"actor": "token:someone"},
    }
    out = {
        what: envelope("AuditFailed", audit_id, {**failure, **more}) for what, more in extra.items()
    }
    out["'auditrec-reconciler' is one of auditrec's own"] = envelope(
        "AuditFailed", audit_id, failure, producer="auditrec-reconciler"
    )
    return out


def _cloudevent(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "specversion": "1.0",
        "id": unique("ce"),
        "source": body.get("producer", "evil"),
        "type": f"dev.auditrec.{body['type']}",
        "subject": body["audit_id"],
        "time": "2026-12-01T00:00:00Z",
        "data": body["data"],
    }


def post_as(client: httpx.Client, mode: str, body: dict[str, Any]) -> httpx.Response:
    """POST ``body`` to /events as ``mode`` sends it: in a list of plain envelopes, or as a
    CloudEvent in structured, batch or binary mode (a list and a batch after a valid start)."""
    if mode == "envelope":
        return client.post("/events", json=[started(unique("x")), body])
    event = _cloudevent(body)
    if mode == "structured":
        content_type = "application/cloudevents+json"
        return client.post(
            "/events", content=json.dumps(event), headers={"content-type": content_type}
        )
    if mode == "batch":
        batch = [_cloudevent(started(unique("x"))), event]
        content_type = "application/cloudevents-batch+json"
        return client.post(
            "/events", content=json.dumps(batch), headers={"content-type": content_type}
        )
    assert mode == "binary"
    headers = {f"ce-{k}": str(v) for k, v in event.items() if k != "data"}
    return client.post(
        "/events",
        content=json.dumps(event["data"]),
        headers={**headers, "content-type": "application/json"},
    )


MODES = ["envelope", "structured", "batch", "binary"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize("token", [OPS, CI], ids=["operate", "publish"])
@pytest.mark.parametrize("mode", MODES)
def test_no_token_posts_what_only_auditrec_writes(live: LiveServer, token: str, mode: str) -> None:
    audit_id = unique("forge")
    with live.client(token) as client:
        publish(client, started(audit_id))
        wait_for(client, audit_id)
        before = lifecycle_types(live)
        answers = {what: post_as(client, mode, body) for what, body in forged(audit_id).items()}
        row = wait_for(client, audit_id)

    for what, answer in answers.items():
        assert answer.status_code == 403, (what, answer.text)
        problems = " ".join(answer.json()["detail"])
        assert what in problems, (what, problems)
        assert "written by auditrec only" in problems
    assert lifecycle_types(live) == before  # nothing at all was published
    assert row["status"] == "running"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize("mode", MODES)
def test_no_publisher_dresses_its_event_up_as_auditrec_s(live: LiveServer, mode: str) -> None:
    audit_id = unique("dressed")
    with live.client(CI) as client:
        publish(client, started(audit_id))
        wait_for(client, audit_id)
        before = lifecycle_types(live)
        # when a workflow's failure comes in dressed up as auditrec's decision (its rule, its
        # probe, its producer) or as someone else's act
        answers = {what: post_as(client, mode, body) for what, body in dressed(audit_id).items()}
        row = wait_for(client, audit_id)

    # then each is refused, naming what gives it away, and nothing is published
    for what, answer in answers.items():
        assert answer.status_code == 403, (what, answer.text)
        problems = " ".join(answer.json()["detail"])
        assert what in problems, (what, problems)
    assert lifecycle_types(live) == before
    assert row["status"] == "running"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_dead_letter_replayed_with_a_forged_body_is_refused(live: LiveServer) -> None:
    assert live.backends is not None
    backends = live.backends
    audit_id = unique("replayed")
    with live.client(OPS) as ops:
        publish(ops, started(audit_id))
        wait_for(ops, audit_id)
        # given a record set aside (it does not decode)
        hostile = OutRecord(backends.topics.lifecycle, audit_id, b'{"type": "AuditStarted"')
        live.call(lambda: backends.log.append([hostile]))
        letters = eventually_sync(
            lambda: ops.get("/dead-letters").json()["dead_letters"],
            until=lambda found: len(found) >= 1,
            message="the hostile record to be dead-lettered",
        )
        position = letters[0]["position"]
        before = lifecycle_types(live)
        # when it is replayed with a body forging what only auditrec writes, or dressing a
        # workflow's failure up as auditrec's decision or as someone else's act
        answers = {
            what: ops.post(f"/dead-letters/{position}/replay", json=body)
            for what, body in {**forged(audit_id), **dressed(audit_id)}.items()
        }
        after = lifecycle_types(live)
        # then each is refused; a publisher's event is still accepted, once
        fixed = ops.post(f"/dead-letters/{position}/replay", json=started(unique("fixed")))
        row = wait_for(ops, audit_id)
        shown = ops.get(f"/dead-letters/{position}").json()

    for what, answer in answers.items():
        assert answer.status_code == 403, (what, answer.text)
        assert what in answer.json()["detail"][0] and "the corrected body" in answer.text
    assert after == before
    assert fixed.status_code == 200 and fixed.json()["published"] is True, fixed.text
    assert row["status"] == "running"
    # and the replay is recorded as the token's, on the log's replay mark
    assert fixed.json()["replayed"]["actor"] == "token:ops"
    assert shown["replayed"]["actor"] == "token:ops"
    assert shown["replayed"]["event_id"] == fixed.json()["event_id"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_replayed_body_reusing_an_event_id_with_other_content_is_refused(
    live: LiveServer,
) -> None:
    assert live.backends is not None
    backends = live.backends
    audit_id = unique("conflict")
    with live.client(OPS) as ops:
        # given an audit whose start the history holds under an event id
        first = started(audit_id)
        (event_id,) = publish(ops, first)
        wait_for(ops, audit_id)
        # and a record set aside
        hostile = OutRecord(backends.topics.lifecycle, audit_id, b'{"type": "AuditStarted"')
        live.call(lambda: backends.log.append([hostile]))
        letters = eventually_sync(
            lambda: ops.get("/dead-letters").json()["dead_letters"],
            until=lambda found: len(found) >= 1,
            message="the hostile record to be dead-lettered",
        )
        position = letters[0]["position"]
        before = lifecycle_types(live)
        # when it is replayed with a body giving that event id other content
        other = {**first, "event_id": event_id, "data": {**first["data"], "pages_total": 7}}
        refused = ops.post(f"/dead-letters/{position}/replay", json=other)
        posted = ops.post("/events", json=[other])
        after = lifecycle_types(live)
        # and with the same content: the event the history holds, accepted
        same = {**first, "event_id": event_id}
        repeated = ops.post(f"/dead-letters/{position}/replay", json=same)

    # then the replay is refused as POST /events refuses it, and nothing is published
    assert refused.status_code == posted.status_code == 409, (refused.text, posted.text)
    (problem,) = refused.json()["detail"]
    assert f"event_id {event_id} of audit {audit_id} already names an event" in problem
    assert refused.json()["detail"] == posted.json()["detail"]
    assert after == before
    assert repeated.status_code == 200 and repeated.json()["published"] is True, repeated.text


async def _produce(bootstrap: str, topic: str, records: list[tuple[str, dict[str, Any]]]) -> None:
    """Write as a Kafka publisher does: its own producer, no auditrec code."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for key, body in records:
            await producer.send_and_wait(topic, json.dumps(body).encode(), key=key.encode())
    finally:
        await producer.stop()


@pytest.mark.kafka
@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["kafka+postgres"], indirect=True)
def test_a_decision_written_to_the_ingest_topic_never_reaches_the_lifecycle_log(
    live: LiveServer, backend: Backend
) -> None:
    assert live.backends is not None
    topics = live.backends.topics
    audit_id, later = unique("ingested"), unique("later")
    forgeries = forged(audit_id)
    records = [
        (audit_id, started(audit_id)),
        *((audit_id, body) for body in forgeries.values()),
        (later, started(later)),  # written after the forgeries, in the same partition or not
    ]
    bootstrap = backend.event_log_url.removeprefix("kafka://")
    asyncio.run(_produce(bootstrap, topics.ingest, records))

    with live.client(OPS) as ops:
        wait_for(ops, later, timeout=30)
        wait_for(ops, audit_id)
        letters = eventually_sync(
            lambda: [
                d
                for d in ops.get("/dead-letters", params={"limit": 100}).json()["dead_letters"]
                if d["consumer"] == topics.group("ingest")
            ],
            until=lambda found: len(found) >= len(forgeries),
            timeout=30,
            message="every forged record to be dead-lettered by the ingest",
        )
        history = ops.get(f"/audits/{audit_id}/events").json()["events"]

    reasons = " ".join(d["reason"] for d in letters)
    assert len(letters) == len(forgeries)
    for what in forgeries:
        assert what in reasons, (what, reasons)
    assert all(d["origin"]["topic"] == topics.ingest for d in letters)
    assert [e["type"] for e in history] == ["AuditStarted"]
    types = lifecycle_types(live)
    assert sorted(types) == ["AuditStarted", "AuditStarted"], types


def test_auditrec_publish_refuses_what_only_auditrec_writes(env: dict[str, str]) -> None:
    assert run("init", env=env).returncode == 0
    bodies = {**forged("a-cli"), **dressed("a-cli")}
    lines = [json.dumps(started("a-cli")), *(json.dumps(b) for b in bodies.values())]

    refused = run("publish", "-", env=env, input="\n".join(lines))
    listed = run("audits", "--json", env=env)

    assert refused.returncode == 2, refused.stderr
    said = {
        line.split(": ", 1)[0]: line
        for line in " ".join(refused.stderr.split()).replace(" line ", "\nline ").splitlines()
    }
    for number, what in enumerate(bodies, start=2):
        assert what in said.get(f"line {number}", ""), (what, said)
    assert "nothing published" in refused.stderr
    assert listed.returncode == 0 and "a-cli" not in listed.stdout


@pytest.mark.kafka
@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["kafka+postgres"], indirect=True)
def test_an_ingest_dead_letter_is_replayed_only_as_what_a_publisher_may_send(
    live: LiveServer, backend: Backend
) -> None:
    assert live.backends is not None
    topics = live.backends.topics
    forged_id, broken_id = unique("forged"), unique("broken")
    release = forged(forged_id)["AuditFailureReleased"]
    broken = envelope("AuditStarted", broken_id, {"organization_id": "o-1"})  # no project_id
    bootstrap = backend.event_log_url.removeprefix("kafka://")
    asyncio.run(_produce(bootstrap, topics.ingest, [(forged_id, release), (broken_id, broken)]))

    with live.client(OPS) as ops:
        letters = eventually_sync(
            lambda: {
                json.loads(d["original"]["value"])["audit_id"]: d["position"]
                for d in (
                    ops.get(f"/dead-letters/{x['position']}").json()
                    for x in ops.get("/dead-letters").json()["dead_letters"]
                )
            },
            until=lambda found: {forged_id, broken_id} <= found.keys(),
            timeout=30,
            message="both records to be dead-lettered by the ingest",
        )
        # the forged release, replayed as it is or with any body, stays refused
        as_is = ops.post(f"/dead-letters/{letters[forged_id]}/replay", headers=JSON)
        # the broken start, corrected, enters the lifecycle log, once
        fixed = {**broken, "data": {"project_id": "p-1"}}
        replayed = ops.post(f"/dead-letters/{letters[broken_id]}/replay", json=fixed)
        again = ops.post(f"/dead-letters/{letters[broken_id]}/replay", json=fixed)
        row = wait_for(ops, broken_id)

    assert as_is.status_code == 403, as_is.text
    assert "AuditFailureReleased is written by auditrec only" in as_is.json()["detail"][0]
    assert replayed.status_code == 200 and replayed.json()["published"] is True, replayed.text
    assert replayed.json()["replayed"]["topic"] == topics.lifecycle
    assert again.json()["published"] is False
    assert row["project_id"] == "p-1"
    assert "AuditFailureReleased" not in lifecycle_types(live)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_console_records_its_token_and_the_person_named(live: LiveServer) -> None:
    audit_id = unique("console")
    with live.client(OPS) as ops:
        publish(ops, started(audit_id))
        wait_for(ops, audit_id)
    with httpx.Client(base_url=live.url, timeout=30) as browser:
        form = browser.get("/ui/login").text
        login_csrf = re.search(r'name="csrf" value="([^"]+)"', form)
        assert login_csrf is not None
        signed = browser.post(
            "/ui/login", data={"token": OPS, "next": "/ui", "csrf": login_csrf[1]}
        )
        assert signed.status_code == 303, signed.text
        page = browser.get(f"/ui/audits/{audit_id}").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        assert csrf is not None
        done = browser.post(
            f"/ui/audits/{audit_id}/fail",
            data={
                "csrf": csrf[1],
                "code": "oom",
                "reason": "r",
                "on_behalf_of": "alice",
                "confirm": "yes",  # (the page before, the confirmation step, records nothing)
            },
        )
        assert done.status_code == 303, done.text
        with live.client(OPS) as ops:
            wait_for(ops, audit_id, lambda r: r["status"] == "failed")
            failure = ops.get(f"/audits/{audit_id}/events").json()["events"][-1]
        shown = browser.get(f"/ui/audits/{audit_id}").text

    assert (failure["data"]["actor"], failure["data"]["on_behalf_of"]) == ("token:ops", "alice")
    assert "actor=token:ops, on_behalf_of=alice" in shown


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_cli_naming_ops_is_never_the_token_named_ops(
    live: LiveServer, backend: Backend
) -> None:
    # given two running audits, and an API token named ops
    by_cli, by_token = unique("cli-ops"), unique("token-ops")
    with live.client(OPS) as ops:
        for audit_id in (by_cli, by_token):
            publish(ops, started(audit_id))
            wait_for(ops, audit_id)

        # when one is failed from the command line naming the operator "ops", a real process
        failed = run_process(
            "fail",
            by_cli,
            "--code",
            "oom",
            "--reason",
            "r",
            "--operator",
            "ops",
            "--json",
            env=backend.environ(),
        )
        # and the other over HTTP with the token named ops
        done = ops.post(f"/audits/{by_token}/fail", json={"code": "oom", "reason": "r"})
        assert done.status_code == 200, done.text
        for audit_id in (by_cli, by_token):
            wait_for(ops, audit_id, lambda r: r["status"] == "failed")
        history = {a: ops.get(f"/audits/{a}/events").json()["events"] for a in (by_cli, by_token)}

    # then the record tells them apart: the command line is the OS user acting for "ops"
    assert failed.returncode == 0, failed.stderr
    user = f"cli:{getpass.getuser()}"
    assert (json.loads(failed.stdout)["actor"], json.loads(failed.stdout)["on_behalf_of"]) == (
        user,
        "ops",
    )
    cli_failure, token_failure = history[by_cli][-1]["data"], history[by_token][-1]["data"]
    assert (cli_failure["actor"], cli_failure["on_behalf_of"]) == (user, "ops")
    assert token_failure["actor"] == "token:ops"
    assert token_failure.get("on_behalf_of") is None
    assert cli_failure["actor"] != token_failure["actor"]
    # and a name posing as the token on the command line is still only the person acted for
    posed = run_process(
        "restore",
        by_cli,
        "--reason",
        "r",
        "--operator",
        "token:ops",
        "--json",
        env=backend.environ(),
    )
    assert posed.returncode == 0, posed.stderr
    assert (json.loads(posed.stdout)["actor"], json.loads(posed.stdout)["on_behalf_of"]) == (
        user,
        "token:ops",
    )
