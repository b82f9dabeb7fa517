"""Picks the event log adapter by URL scheme (kept apart from the port, so adapters import the
port and never the reverse). The adapters are imported when chosen: the SQLite default never
loads aiokafka."""

from __future__ import annotations

from typing import Any

from consumers.eventlog.port import EventLog, Topics
from statemachine.errors import ConfigError

__all__ = ["open_event_log"]


def open_event_log(url: str, topics: Topics, **options: Any) -> EventLog:
    """The adapter for ``url``'s scheme: ``sqlite:///path`` or ``kafka://host:port[,host]``."""
    if url.startswith("sqlite://"):
        from consumers.eventlog.sqlite.log import SQLiteEventLog

        return SQLiteEventLog(url, topics)
    if url.startswith("kafka://"):
        from consumers.eventlog.kafka.log import KafkaEventLog

        return KafkaEventLog(url, topics, **options)
    raise ConfigError(f"AUDITREC_EVENT_LOG_URL: unsupported scheme in {url.split('://')[0]!r}")
