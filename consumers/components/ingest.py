"""The ingest component: what Kafka publishers write, validated onto the lifecycle log.

Publishers that write Kafka directly write the ingest topic (``AUDITREC_INGEST_TOPIC``,
default ``<prefix>.ingest.v1``), never the lifecycle topic: with the ACLs of the security
guide, only auditrec's principal may write that one. Each ingest record is judged by the rule
every door applies (:func:`statemachine.admission.refusal`: the publisher types,
``AuditFailed`` only as the workflow's; and no ``data.actor``, since no one authenticated) and
validated as ``POST /events`` validates (old versions upcast, ``event_id``, ``occurred_at``,
``schema_version`` and ``producer`` may be left out); then it is appended to the lifecycle
topic, keyed by its audit id. A record refused or invalid is dead-lettered with the reason and
never reaches the lifecycle log.

Offsets are committed once the appends are acknowledged, never before: after a crash between
the two, the records are read again and appended again with the same ``event_id`` — one given
by the publisher, or one derived from the record's position — which the projector and the
reconciler already apply once. An omitted ``occurred_at`` is the record's timestamp, for the
same reason. (No Kafka transaction: its commit would add tens of milliseconds to every batch,
for duplicates the consumers absorb anyway; see ``bench/ingest.py``.)
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import structlog
from pydantic import ValidationError

from consumers.components.base import LogConsumer
from consumers.eventlog.codec import describe, encode
from consumers.eventlog.port import EventLog, OutRecord, Record
from consumers.runtime.metrics import INGESTED
from statemachine.admission import refusal
from statemachine.errors import InvalidInput, Refused
from statemachine.events import EVENT_ADAPTER, AuditEvent, derived_id
from statemachine.upcasting import CURRENT_VERSION, upcast

__all__ = ["PRODUCER", "Ingest", "admit"]

PRODUCER = "auditrec-ingest"  # of a record that names none
log = structlog.get_logger("auditrec.ingest")


def admit(record: Record) -> AuditEvent:
    """The lifecycle event an ingest record stands for, or why it may not enter:
    :class:`Refused` (a type only auditrec writes), :class:`InvalidInput` (not a valid event)."""
    try:
        raw = json.loads(record.value)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInput(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidInput("not valid JSON: nested too deeply") from None
    if not isinstance(raw, dict):
        raise InvalidInput("not a JSON object (an event envelope)")
    refused = refusal(raw, None)  # (a Kafka record authenticated to no one: it names no actor)
    if refused is not None:
        raise Refused(f"refused: {refused}")
    try:
        return EVENT_ADAPTER.validate_python(upcast(_completed(raw, record)))
    except ValidationError as exc:
        raise InvalidInput(describe(exc)) from None


def _completed(raw: dict[str, Any], record: Record) -> dict[str, Any]:
    """``raw`` with what a publisher may leave out filled in, the same on every reading of
    the record (so that an append after a crash is the same event)."""
    out = dict(raw)
    if out.get("event_id") is None:
        where = f"{record.topic}/{record.partition}/{record.offset}"
        out["event_id"] = str(derived_id(where, "ingest"))
    if out.get("occurred_at") is None:
        out["occurred_at"] = datetime.fromtimestamp(record.timestamp_ms / 1000, UTC).isoformat()
    if out.get("schema_version") is None:
        out["schema_version"] = CURRENT_VERSION.get(str(out.get("type")), 1)
    if out.get("producer") is None:
        out["producer"] = PRODUCER
    return out


class Ingest(LogConsumer):
    """Reads the ingest topic; appends what may enter to the lifecycle topic, dead-letters the
    rest, and commits each partition's offset with its appends."""

    name = "ingest"
    transactional = False  # append, then commit: a duplicate after a crash is absorbed
    max_records = 1000

    def __init__(self, event_log: EventLog) -> None:
        super().__init__(event_log, [event_log.topics.ingest])
        self.appended = 0

    async def _handle(self, records: list[Record]) -> int:
        lifecycle = self.log.topics.lifecycle
        outputs: dict[tuple[str, int], list[OutRecord]] = {}
        now_ms = time.time() * 1000
        for record in records:
            out = outputs.setdefault((record.topic, record.partition), [])
            try:
                event = admit(record)
            except InvalidInput as exc:
                self.dead_letter(record, str(exc)[:2000], out)
                INGESTED.labels("refused" if isinstance(exc, Refused) else "invalid").inc()
                continue
            out.append(encode(lifecycle, event))
            INGESTED.labels("appended").inc()
            if record.timestamp_ms:
                log.debug(
                    "ingested",
                    audit_id=event.audit_id,
                    type=event.type,
                    waited_ms=round(now_ms - record.timestamp_ms, 1),
                )
        await self.commit(records, outputs)
        self.appended += sum(1 for out in outputs.values() for o in out if o.topic == lifecycle)
        return len(records)
