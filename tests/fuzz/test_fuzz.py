"""Fuzzing the edges: publishing (the path of `POST /events` and `auditrec publish`) and the
consumers on each backend pair, with hostile input. Nothing crashes, nothing is lost: an
envelope is either accepted (and then it fits every store) or rejected naming the problem; a
record on the log is either projected or in the dead-letter topic with the reason, and the
table is the fold of what was accepted.

`make test` runs a short deterministic profile; `make fuzz` sets AUDITREC_FUZZ_EXAMPLES higher.
"""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import HealthCheck, given, settings

from consumers.components.projector import Projector
from consumers.components.reconciler import Reconciler
from consumers.eventlog.codec import decode, encode
from consumers.eventlog.port import OutRecord
from consumers.operations.publishing import validate_items
from projections.row import AuditRow, project, row_dict
from statemachine.errors import DecodeError, InvalidInput
from statemachine.events import AuditEvent
from statemachine.policy import Policy
from tests.fuzz.hostile import FUZZ_EXAMPLES, envelopes, records
from tests.pipeline import Pipeline, read_topic, run_until_idle

PROFILE = settings(
    max_examples=FUZZ_EXAMPLES,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@PROFILE
@given(envelopes())
def test_publishing_accepts_only_what_every_store_holds_and_names_every_refusal(
    raw: Any,
) -> None:
    try:
        [event] = validate_items([raw])
    except InvalidInput as refused:
        # refused: every problem names the item and says what is wrong
        assert refused.problems
        assert all(p.startswith("item 0: ") and len(p) > len("item 0: ") for p in refused.problems)
        return
    # accepted: it travels through the log unchanged, and projects
    assert decode(encode("audit.lifecycle.v1", event).value) == event
    row = project(None, event)
    json.dumps(row_dict(row))


async def test_consumers_on_each_backend_survive_hostile_records(pipeline: Pipeline) -> None:
    # given a log whose lifecycle topic holds valid events and hostile records, interleaved
    topic = pipeline.topics.lifecycle
    drawn = records(random.Random(20261201), max(FUZZ_EXAMPLES, 60))
    await pipeline.log.append([OutRecord(topic, key, value) for key, value in drawn])

    # when the projector and the reconciler have caught up: no crash, no restart loop
    async with (
        Projector(pipeline.log, pipeline.store.writer) as projector,
        Reconciler(pipeline.log, Policy()) as reconciler,
    ):
        await run_until_idle(projector, reconciler, timeout=120)

    # then every record was either accepted (projected) or set aside with a reason
    on_log = await read_topic(pipeline.log, topic)
    accepted: list[tuple[int, int, AuditEvent]] = []
    rejected = 0
    for record in on_log:
        try:
            accepted.append((record.partition, record.offset, decode(record.value)))
        except DecodeError:
            rejected += 1
    letters = [
        json.loads(r.value) for r in await read_topic(pipeline.log, pipeline.topics.dead_letter)
    ]
    by_projector = [d for d in letters if d["consumer"] == pipeline.topics.group("projector")]
    assert rejected > 0 and len(by_projector) == rejected
    assert all(d["error"] for d in by_projector)
    # and the table is exactly the fold of the accepted events, per audit, in log order
    expected: dict[str, AuditRow] = {}
    for _, _, event in sorted(accepted, key=lambda item: item[:2]):
        expected[event.audit_id] = project(expected.get(event.audit_id), event)
    for audit_id, row in expected.items():
        stored = await pipeline.store.audits.get(audit_id)
        if row.status == "none":
            assert stored is None
            continue
        assert stored is not None, audit_id
        assert (stored.state, stored.version) == (row.state, row.version)
