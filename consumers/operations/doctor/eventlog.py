"""The event log's checks: reachable with its three topics, and the clock against the log's.
Read only: topics are listed, never created, and nothing is appended."""

from __future__ import annotations

import time

from consumers.eventlog.factory import list_topics
from consumers.eventlog.port import Topics
from consumers.operations.doctor.files import absolute_advice, resolved_path
from consumers.operations.doctor.report import CHECK_TIMEOUT, Check
from consumers.runtime.settings import Settings
from statemachine.errors import AuditrecError

__all__ = ["check_clock", "check_event_log"]

NAME = "event log"
INIT = "run `auditrec init`"
MAX_SKEW_MS = 5_000


def _kafka(settings: Settings) -> bool:
    return settings.event_log_url.startswith("kafka://")


async def check_event_log(settings: Settings, timeout: float = CHECK_TIMEOUT) -> Check:
    topics = Topics(settings.topic_prefix, settings.group_prefix, settings.ingest_topic)
    path = resolved_path(settings.event_log_url)
    where = "Kafka" if path is None else f"embedded log {path}"
    init = INIT if path is None else f"{INIT} (it creates {path})"
    if (advice := absolute_advice(settings.event_log_url, "AUDITREC_EVENT_LOG_URL")) is not None:
        init = f"{advice}; else {init}"
    options = {"settings": settings} if _kafka(settings) else {}
    try:
        present = await list_topics(settings.event_log_url, timeout=timeout, **options)
    except AuditrecError as exc:
        return Check(
            NAME,
            False,
            f"{where} unreachable: {exc}",
            "check AUDITREC_EVENT_LOG_URL (and AUDITREC_KAFKA_* for a secured cluster), and "
            "that the broker is up",
        )
    if present is None:
        return Check(NAME, False, f"{where}: no file yet (not initialised)", init)
    missing = [t for t in topics.all() if t not in present]
    if missing:
        return Check(NAME, False, f"{where} reachable; topics missing: {', '.join(missing)}", INIT)
    return Check(NAME, True, f"{where} reachable; topics {', '.join(topics.all())}")


async def check_clock(settings: Settings, timeout: float = CHECK_TIMEOUT) -> Check:
    """Decisions compare event times with this machine's clock. The embedded log shares the
    machine's clock. On Kafka, without writing (the broker tells its time only in records it
    appends), the skew is seen one way: records stamped more than :data:`MAX_SKEW` ahead of
    this machine's clock (by the broker or a producer) mean this clock is behind."""
    name = "clock"
    if not _kafka(settings):
        return Check(name, True, "same machine as the embedded log: no skew possible")
    from consumers.eventlog.kafka.survey import first_stamped_after

    topics = Topics(settings.topic_prefix, settings.group_prefix, settings.ingest_topic)
    now_ms = int(time.time() * 1000)
    try:
        ahead = await first_stamped_after(
            settings.event_log_url, settings, topics.all(), now_ms + MAX_SKEW_MS, timeout=timeout
        )
    except AuditrecError as exc:
        return Check(name, False, f"not measurable: {exc}", "see the event log check")
    if ahead is not None:
        topic, stamped = ahead
        return Check(
            name,
            False,
            f"a record on {topic} is stamped {(stamped - now_ms) / 1000:.0f}s ahead of this "
            "machine's clock (by the broker or its producer)",
            "sync the clock (NTP) of this machine, the brokers and every producer",
        )
    return Check(
        name,
        True,
        f"no record stamped over {MAX_SKEW_MS // 1000}s ahead of this machine's clock (a "
        "clock ahead of the broker's is not measurable without writing to the log)",
    )
