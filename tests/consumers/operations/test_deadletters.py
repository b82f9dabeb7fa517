"""Dead letters on each backend pair, with the real projector and reconciler: a hostile
record is set aside once, listed with every consumer's reason, shown, refused while it still
fails, replayed once it is valid — and replayed once however often it is asked, a crash
between publish and bookkeeping included; and purged once old, the purge recorded."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from structlog.testing import capture_logs

from consumers.components.deadletters import DeadLetterCount
from consumers.components.projector import Projector
from consumers.components.reconciler import Reconciler
from consumers.eventlog.codec import dead_letter, decode, decode_probe, encode
from consumers.eventlog.port import OutRecord, Record, Topics
from consumers.operations.deadletters import (
    list_dead_letters,
    replay_dead_letter,
    show_dead_letter,
)
from consumers.operations.purging import purge_dead_letters
from consumers.runtime.metrics import DEAD_LETTERS_KEPT, DEAD_LETTERS_PURGED
from statemachine.errors import InvalidInput, NotFound, Refused
from statemachine.policy import Policy
from tests.contracts.projection_store import at, started
from tests.pipeline import Pipeline, append, probe_request, read_topic, run_until_idle

HOSTILE = b'{"type": "AuditStarted", "audit_id": "a-dl", "data": {"project_id": "p-1"'


def corrected(audit_id: str = "a-dl") -> bytes:
    return json.dumps(
        {
            "type": "AuditStarted",
            "audit_id": audit_id,
            "occurred_at": at(0).isoformat(),
            "data": {"project_id": "p-1", "workflow_instance_id": f"wf-{audit_id}"},
        }
    ).encode()


async def project(pipeline: Pipeline, *, reconciler: bool = False) -> None:
    components: list[Any] = [Projector(pipeline.log, pipeline.store.writer)]
    if reconciler:
        components.append(Reconciler(pipeline.log, Policy()))
    for c in components:
        await c.start()
    try:
        await run_until_idle(*components)
    finally:
        for c in components:
            await c.stop()


async def lifecycle(pipeline: Pipeline) -> list[Record]:
    return await read_topic(pipeline.log, pipeline.topics.lifecycle)


async def test_a_hostile_record_is_listed_shown_refused_then_replayed_once(
    pipeline: Pipeline,
) -> None:
    log, topics = pipeline.log, pipeline.topics
    # given a record cut short, read by the projector and the reconciler
    await log.append([OutRecord(topics.lifecycle, "a-dl", HOSTILE)])
    await project(pipeline, reconciler=True)

    # then both set it aside, and the log keeps it once, with each one's reason (the same words)
    listed = (await list_dead_letters(log))["dead_letters"]
    (letter,) = listed
    assert letter["consumer"] in (topics.group("projector"), topics.group("reconciler"))
    assert letter["origin"]["topic"] == topics.lifecycle and letter["key"] == "a-dl"
    assert letter["reason"].startswith("not valid JSON") and letter["replayed"] is None
    assert sorted((r["consumer"], r["reason"]) for r in letter["reasons"]) == [
        (topics.group(name), letter["reason"]) for name in ("projector", "reconciler")
    ]
    mine = await list_dead_letters(log, consumer=letter["consumer"])
    assert mine["dead_letters"] == listed
    by_position = await list_dead_letters(log, order="position", limit=1)
    assert by_position["dead_letters"] == listed

    # and show gives the reason and the original as text, which still does not decode
    shown = await show_dead_letter(log, letter["position"])
    assert shown["original"] == {"encoding": "text", "value": HOSTILE.decode()}
    assert shown["decodes"] is False and "not valid JSON" in shown["decode_error"]

    # when it is replayed as it is: refused with the reason, nothing published
    before = len(await lifecycle(pipeline))
    with pytest.raises(InvalidInput, match="still does not decode: not valid JSON"):
        await replay_dead_letter(log, letter["position"], actor="test")
    # and a corrected body that is still invalid is refused too
    with pytest.raises(InvalidInput, match="corrected body still does not decode"):
        await replay_dead_letter(log, letter["position"], actor="test", body=b'{"type": "Nope"}')
    dry = await replay_dead_letter(
        log, letter["position"], actor="test", body=corrected(), dry_run=True
    )
    assert dry["published"] is False and dry["type"] == "AuditStarted"
    assert len(await lifecycle(pipeline)) == before

    # when it is replayed with a corrected body
    done = await replay_dead_letter(log, letter["position"], actor="test", body=corrected())
    assert done["published"] is True and done["event_id"] == dry["event_id"]
    await project(pipeline)
    row = await pipeline.store.audits.get("a-dl")
    assert row is not None and row.status == "running"
    assert str(row.last_event_id) == done["event_id"]

    # then replaying it again publishes nothing
    again = await replay_dead_letter(log, letter["position"], actor="test", body=corrected())
    assert again["published"] is False
    assert again["replayed"]["event_id"] == done["event_id"]
    assert again["replayed"]["dead_letter"] == letter["position"]
    assert len(await lifecycle(pipeline)) == before + 1
    (listed_after,) = (await list_dead_letters(log))["dead_letters"]  # marks are no letters
    assert listed_after["replayed"] is not None


async def test_a_record_set_aside_that_now_decodes_is_replayed_as_it_is(
    pipeline: Pipeline,
) -> None:
    log, topics = pipeline.log, pipeline.topics
    # given a running audit, and a version 1 failure an older release set aside (it had no
    # upcaster for it); the current codec upcasts it
    await append(log, topics.lifecycle, [started("a-old", at(0))])
    v1 = {
        "type": "AuditFailed",
        "schema_version": 1,
        "event_id": str(uuid.uuid4()),
        "audit_id": "a-old",
        "occurred_at": at(5).isoformat(),
        "producer": "crawler",
        "data": {"error_code": "oom", "error_detail": "out of memory", "failed_by": "workflow"},
    }
    original = Record(topics.lifecycle, 0, 41, "a-old", json.dumps(v1).encode())
    await log.append([dead_letter(topics, original, "old-projector", "unknown schema_version 1")])
    (item,) = (await list_dead_letters(log))["dead_letters"]

    shown = await show_dead_letter(log, item["position"])
    assert shown["decodes"] is True and shown["decoded"]["schema_version"] == 2

    # when it is replayed twice
    first = await replay_dead_letter(log, item["position"], actor="test")
    second = await replay_dead_letter(log, item["position"], actor="test")

    # then it is published once, as the event it was (its id), and projected
    assert (first["published"], second["published"]) == (True, False)
    assert first["event_id"] == v1["event_id"] == second["event_id"]
    await project(pipeline)
    row = await pipeline.store.audits.get("a-old")
    assert row is not None and (row.status, row.state.error_code) == ("failed", "oom")
    replayed = [decode(r.value) for r in await lifecycle(pipeline)]
    assert [str(e.event_id) for e in replayed].count(v1["event_id"]) == 1


async def test_a_crash_between_publish_and_mark_leaves_one_event(pipeline: Pipeline) -> None:
    log, topics = pipeline.log, pipeline.topics
    await log.append([OutRecord(topics.lifecycle, "a-dl", HOSTILE)])
    await project(pipeline)
    (item,) = (await list_dead_letters(log))["dead_letters"]
    # given a replay that published its event and died before marking it (simulated: the
    # event a replay of this body publishes, appended alone)
    dry = await replay_dead_letter(log, item["position"], actor="t", body=corrected(), dry_run=True)
    event = decode(dry_body := corrected_with_id(dry["event_id"]))
    assert str(event.event_id) == dry["event_id"], dry_body
    await log.append([encode(topics.lifecycle, event)])

    # when the operator replays it again
    done = await replay_dead_letter(log, item["position"], actor="t", body=corrected())

    # then the same event is published again, and the projection holds it once
    assert done["published"] is True and done["event_id"] == dry["event_id"]
    await project(pipeline)
    history = await pipeline.store.audits.history("a-dl")
    assert [str(h.event.event_id) for h in history] == [dry["event_id"]]


def corrected_with_id(event_id: str) -> bytes:
    raw = json.loads(corrected())
    raw.update(event_id=event_id, producer="auditrec-dead-letters", schema_version=1)
    return json.dumps(raw).encode()


async def test_positions_that_hold_no_dead_letter_are_named(pipeline: Pipeline) -> None:
    with pytest.raises(InvalidInput, match="invalid dead-letter position 'x'"):
        await show_dead_letter(pipeline.log, "x")
    with pytest.raises(NotFound, match="no dead letter at 0:99"):
        await replay_dead_letter(pipeline.log, "0:99", actor="t")
    with pytest.raises(InvalidInput, match="invalid limit 0"):
        await list_dead_letters(pipeline.log, limit=0)
    assert (await list_dead_letters(pipeline.log))["dead_letters"] == []


async def test_a_probe_request_set_aside_is_replayed_to_the_probe_requests_topic(
    pipeline: Pipeline,
) -> None:
    log, topics = pipeline.log, pipeline.topics
    request = probe_request("a-pr", "wf-a-pr", at(0))
    original = encode(topics.probe_requests, request)
    where = Record(topics.probe_requests, 0, 7, original.key, original.value)
    await log.append([dead_letter(topics, where, topics.group("probe"), "Workflows API down")])
    (item,) = (await list_dead_letters(log))["dead_letters"]
    assert item["origin"] == {"topic": topics.probe_requests, "partition": 0, "offset": 7}

    done = await replay_dead_letter(log, item["position"], actor="t")

    assert done["published"] is True and done["type"] == "ProbeRequested"
    (replayed,) = await read_topic(log, topics.probe_requests)
    assert decode_probe(replayed.value) == request
    assert await read_topic(log, topics.lifecycle) == []


def legacy_letter(topics: Topics, record: Record, consumer: str, error: str) -> OutRecord:
    """A dead letter as written before they were kept once: keyed by the audit id, with no
    ``dead-letter-of`` header and no ``reasons`` (one per consumer)."""
    letter = dead_letter(topics, record, consumer, error)
    body = json.loads(letter.value)
    del body["reasons"]
    return OutRecord(
        topics.dead_letter, record.key or "", json.dumps(body).encode(), letter.headers[:1]
    )


async def test_every_consumers_reason_is_on_the_one_dead_letter(pipeline: Pipeline) -> None:
    log, topics = pipeline.log, pipeline.topics
    # given a record the projector could not decode and telemetry could not handle
    await log.append([OutRecord(topics.lifecycle, "a-two", HOSTILE)])
    (bad,) = await lifecycle(pipeline)
    projector, telemetry = topics.group("projector"), topics.group("telemetry")
    await log.append([dead_letter(topics, bad, projector, "not valid JSON")])
    await log.append([dead_letter(topics, bad, telemetry, "cannot be handled: boom")])

    # then it is listed once, with both reasons, and found by either consumer
    (item,) = (await list_dead_letters(log))["dead_letters"]
    assert item["reasons"] == [
        {"consumer": projector, "reason": "not valid JSON"},
        {"consumer": telemetry, "reason": "cannot be handled: boom"},
    ]
    assert (item["consumer"], item["reason"]) == (projector, "not valid JSON")
    for group in (projector, telemetry):
        assert (await list_dead_letters(log, consumer=group))["dead_letters"] == [item]
    by_position = (await list_dead_letters(log, order="position"))["dead_letters"]
    assert by_position == [item]
    shown = await show_dead_letter(log, item["position"])
    assert shown["reasons"] == item["reasons"]


async def test_dead_letters_written_once_per_consumer_before_are_merged(
    pipeline: Pipeline,
) -> None:
    log, topics = pipeline.log, pipeline.topics
    await log.append([OutRecord(topics.lifecycle, "a-old", HOSTILE)])
    (bad,) = await lifecycle(pipeline)
    projector, reconciler = topics.group("projector"), topics.group("reconciler")
    await log.append([legacy_letter(topics, bad, projector, "not valid JSON")])
    await log.append([legacy_letter(topics, bad, reconciler, "not valid JSON")])
    await log.append([legacy_letter(topics, bad, reconciler, "cannot be handled: boom")])
    assert len(await read_topic(log, topics.dead_letter)) == 3

    (item,) = (await list_dead_letters(log))["dead_letters"]
    assert item["key"] == "a-old" and item["consumer"] == projector
    assert [(r["consumer"], r["reason"]) for r in item["reasons"]] == [
        (projector, "not valid JSON"),
        (reconciler, "not valid JSON"),
        (reconciler, "cannot be handled: boom"),
    ]
    assert (await list_dead_letters(log, order="position"))["dead_letters"] == [item]


async def test_purge_removes_the_dead_letters_older_than_a_duration_and_records_it(
    pipeline: Pipeline,
) -> None:
    log, topics = pipeline.log, pipeline.topics
    # given an old dead letter (with a note), then, later, a new one
    await log.append(
        [
            OutRecord(topics.lifecycle, "a-old", HOSTILE),
            OutRecord(topics.lifecycle, "a-new", HOSTILE),
        ]
    )
    old, new = sorted(await lifecycle(pipeline), key=lambda r: r.key or "")[1::-1]
    assert (old.key, new.key) == ("a-old", "a-new")
    await log.append([dead_letter(topics, old, "p", "one"), dead_letter(topics, old, "t", "two")])
    await asyncio.sleep(0.05)  # apart in time: the purge cuts between the two
    between = datetime.now(UTC)
    await asyncio.sleep(0.05)
    await log.append([dead_letter(topics, new, "p", "one")])
    counted = DeadLetterCount(log)
    assert sum((await counted.refresh()).values()) == 2
    held = await read_topic(log, topics.dead_letter)

    # when a dry run, then a purge, of what is older than an hour, an hour after ``between``
    later = between + timedelta(hours=1)
    dry = await purge_dead_letters(log, timedelta(hours=1), actor="ops", dry_run=True, now=later)
    assert (dry["dead_letters"], dry["records"], dry["dry_run"]) == (1, 2, True)
    assert await read_topic(log, topics.dead_letter) == held
    before = DEAD_LETTERS_PURGED._value.get()
    with capture_logs() as logs:
        done = await purge_dead_letters(log, timedelta(hours=1), actor="ops", now=later)

    # then the old one is gone, the new one is kept, and the purge is recorded
    assert (done["dead_letters"], done["actor"], done["older_than"]) == (1, "ops", "1h")
    (item,) = (await list_dead_letters(log))["dead_letters"]
    assert item["key"] == "a-new"
    marks = [r for r in await read_topic(log, topics.dead_letter) if dict(r.headers).get("purge")]
    (mark,) = marks
    recorded = json.loads(mark.value)
    assert (recorded["actor"], recorded["dead_letters"], recorded["older_than"]) == ("ops", 1, "1h")
    assert recorded["records"] == 2 and recorded["partition"] == mark.partition
    assert DEAD_LETTERS_PURGED._value.get() == before + 1
    (line,) = [e for e in logs if e["event"] == "dead letters purged"]
    assert (line["actor"], line["dead_letters"], line["older_than"]) == ("ops", 1, "1h")
    counts = await counted.refresh()  # the gauge follows the purge
    assert sum(counts.values()) == 1
    for partition, count in counts.items():
        assert DEAD_LETTERS_KEPT.labels(topics.dead_letter, str(partition))._value.get() == count

    # and purging again finds nothing older
    again = await purge_dead_letters(log, timedelta(hours=1), actor="ops", now=later)
    assert again["dead_letters"] == 0 and again["partitions"] == []


async def test_a_corrected_body_names_only_the_replaying_actor(pipeline: Pipeline) -> None:
    log, topics = pipeline.log, pipeline.topics
    await log.append([OutRecord(topics.lifecycle, "a-dl", HOSTILE)])
    await project(pipeline)
    (item,) = (await list_dead_letters(log))["dead_letters"]
    failure = {"error_code": "oom", "error_detail": "x", "failed_by": "workflow"}

    def body(actor: str) -> bytes:
        data = {**failure, "actor": actor}
        return json.dumps({"type": "AuditFailed", "audit_id": "a-dl", "data": data}).encode()

    # when the CLI user cli:alice replays it with a body naming someone else as the actor
    with pytest.raises(Refused, match=r"the corrected body: data.actor: 'token:ops' is not who"):
        await replay_dead_letter(log, item["position"], actor="cli:alice", body=body("token:ops"))
    assert (await list_dead_letters(log))["dead_letters"][0]["replayed"] is None

    # then naming themselves, it is published, and the mark is theirs
    done = await replay_dead_letter(
        log, item["position"], actor="cli:alice", body=body("cli:alice")
    )
    assert done["published"] is True and done["replayed"]["actor"] == "cli:alice"
