"""Picks the event log adapter by URL scheme (kept apart from the port, so adapters import the
port and never the reverse). The adapters are imported when chosen: the SQLite default never
loads aiokafka."""

from __future__ import annotations

from typing import Any

from consumers.eventlog.port import EventLog, Topics
from statemachine.errors import ConfigError

__all__ = ["list_topics", "open_event_log"]


def open_event_log(url: str, topics: Topics, **options: Any) -> EventLog:
    """The adapter for ``url``'s scheme: ``sqlite:///path`` or ``kafka://host:port[,host]``."""
    if url.startswith("sqlite://"):
        from consumers.eventlog.sqlite.log import SQLiteEventLog

        return SQLiteEventLog(url, topics)
    if url.startswith("kafka://"):
        from consumers.eventlog.kafka.log import KafkaEventLog

        return KafkaEventLog(url, topics, **options)
    raise ConfigError(f"AUDITREC_EVENT_LOG_URL: unsupported scheme in {url.split('://')[0]!r}")


async def list_topics(url: str, *, timeout: float = 5.0, **options: Any) -> set[str] | None:
    """The topics the log at ``url`` holds, read without creating anything (``None``: an
    embedded log without its file); ``options`` as for :func:`open_event_log` (``settings``
    for Kafka's connection). Raises :class:`~statemachine.errors.EventLogError` when the log
    cannot be read."""
    if url.startswith("sqlite://"):
        from consumers.eventlog.sqlite import survey as sqlite_survey

        return await sqlite_survey.list_topics(url)
    if url.startswith("kafka://"):
        from consumers.eventlog.kafka import survey as kafka_survey

        return await kafka_survey.list_topics(url, options["settings"], timeout=timeout)
    raise ConfigError(f"AUDITREC_EVENT_LOG_URL: unsupported scheme in {url.split('://')[0]!r}")
