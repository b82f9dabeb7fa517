"""Purging old dead letters (``auditrec dead-letters purge``, ``POST /dead-letters/purge``):
the one way the dead-letter topic shrinks, recorded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from consumers.eventlog.dead_letters import purge_mark, read_dead_letter
from consumers.eventlog.port import EventLog
from consumers.runtime.metrics import DEAD_LETTERS_PURGED
from statemachine.policy import format_duration

__all__ = ["purge_dead_letters"]

_logger = structlog.get_logger("auditrec")


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


async def purge_dead_letters(
    log: EventLog,
    older_than: timedelta,
    *,
    actor: str,
    dry_run: bool = False,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Remove the records of the dead-letter topic written more than ``older_than`` ago: the
    dead letters, and the notes and marks among them. Per partition, what is older is a
    prefix (records are appended in time order), trimmed through the log's retention port.

    Recorded three ways: a purge mark appended first to each partition purged (who, when,
    older than what, which offsets, how many dead letters: it stays after the trim, as the
    partition's newest record), the ``dead letters purged`` log line, and
    ``auditrec_dead_letters_purged_total``. ``dry_run``: count only."""
    at = now or datetime.now(UTC)
    cutoff = at - older_than
    topic = log.topics.dead_letter
    cuts = await log.inspection.offsets_at(topic, int(cutoff.timestamp() * 1000))
    starts = await log.inspection.start_offsets(topic)
    parts: list[dict[str, Any]] = []
    for partition, cut in sorted(cuts.items()):
        start = starts.get(partition, 0)
        if cut <= start:
            continue
        letters = records = 0
        async for batch in log.inspection.read(topic, partition, start, cut):
            records += len(batch)
            letters += sum(1 for r in batch if read_dead_letter(r) is not None)
        if records:
            parts.append(
                {
                    "partition": partition,
                    "from": start,
                    "to": cut,
                    "dead_letters": letters,
                    "records": records,
                }
            )
    result: dict[str, Any] = {
        "older_than": format_duration(older_than),
        "cutoff": _iso(cutoff),
        "dry_run": dry_run,
        "actor": actor,
        "at": _iso(at),
        "dead_letters": sum(p["dead_letters"] for p in parts),
        "records": sum(p["records"] for p in parts),
        "partitions": parts,
    }
    if dry_run or not parts:
        return result
    marks = [
        purge_mark(topic, p["partition"], actor, at, result["older_than"], result["cutoff"], p)
        for p in parts
    ]
    await log.append(marks)
    await log.retention.trim(topic, {p["partition"]: p["to"] for p in parts})
    DEAD_LETTERS_PURGED.inc(result["dead_letters"])
    log_line = {k: result[k] for k in ("actor", "older_than", "cutoff", "dead_letters", "records")}
    _logger.warning("dead letters purged", topic=topic, partitions=parts, **log_line)
    return result
