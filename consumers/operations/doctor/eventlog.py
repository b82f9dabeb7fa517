"""The event log's checks: reachable with its three topics, and the clock against the
broker's. Read only: topics are listed, never created (a metadata request naming topics could
create them on a broker that auto-creates topics)."""

from __future__ import annotations

from consumers.eventlog.factory import list_topics
from consumers.eventlog.port import Topics
from consumers.operations.doctor.report import CHECK_TIMEOUT, Check
from consumers.runtime.settings import Settings
from statemachine.errors import AuditrecError

__all__ = ["check_clock", "check_event_log"]

NAME = "event log"
INIT = "run `auditrec init`"


def _kafka(settings: Settings) -> bool:
    return settings.event_log_url.startswith("kafka://")


async def check_event_log(settings: Settings, timeout: float = CHECK_TIMEOUT) -> Check:
    topics = Topics(settings.topic_prefix, settings.group_prefix)
    where = "Kafka" if _kafka(settings) else "embedded log"
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
        return Check(NAME, False, f"{where}: no file yet (not initialised)", INIT)
    missing = [t for t in topics.all() if t not in present]
    if missing:
        return Check(NAME, False, f"{where} reachable; topics missing: {', '.join(missing)}", INIT)
    return Check(NAME, True, f"{where} reachable; topics {', '.join(topics.all())}")


async def check_clock(settings: Settings) -> Check:
    """Decisions compare event times with this machine's clock. The embedded log shares the
    machine's clock. Kafka's protocol carries the broker's time only in the timestamps of
    records it appends (``LogAppendTime``), and doctor appends nothing: the skew is not
    measured there."""
    if not _kafka(settings):
        return Check("clock", True, "same machine as the embedded log: no skew possible")
    return Check(
        "clock",
        True,
        "skew against the broker not measurable without writing to the log (Kafka reports "
        "its time only in records it appends); keep every host on NTP",
    )
