"""The Kafka log's topics, as :meth:`~consumers.eventlog.kafka.log.KafkaEventLog.init` makes
them (existing topics are never altered):

- lifecycle: ``lifecycle_partitions`` partitions, kept forever (``retention.ms=-1``,
  ``retention.bytes=-1``: it is the event store);
- probe requests: the same partition count, kept one day;
- dead letter: 3 partitions, kept forever too: dead letters are removed only by
  ``auditrec dead-letters purge``, which records who removed what (a topic made by an earlier
  version keeps the 90 days it was given);
- ingest (what Kafka publishers write): the lifecycle's partition count, kept 7 days (the
  ingest component copies each record onto the lifecycle within moments).

A new topic takes a moment to have a leader for every partition: ``init`` waits for them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError, for_code

from consumers.eventlog.port import Topics
from statemachine.errors import EventLogError

__all__ = ["DAY_MS", "DEAD_LETTER_PARTITIONS", "create_topics", "new_topics", "wait_for_leaders"]

DAY_MS = 24 * 3600 * 1000
DEAD_LETTER_PARTITIONS = 3

Describe = Callable[[list[str]], Awaitable[list[dict[str, Any]]]]


def new_topics(topics: Topics, partitions: int, replication_factor: int) -> list[NewTopic]:
    rf = replication_factor
    n = partitions
    forever = {"retention.ms": "-1", "retention.bytes": "-1"}
    return [
        NewTopic(topics.lifecycle, n, rf, topic_configs=forever),
        NewTopic(topics.probe_requests, n, rf, topic_configs={"retention.ms": str(DAY_MS)}),
        # dead letters are removed only by `auditrec dead-letters purge`, which records it
        NewTopic(topics.dead_letter, DEAD_LETTER_PARTITIONS, rf, topic_configs=forever),
        NewTopic(topics.ingest, n, rf, topic_configs={"retention.ms": str(7 * DAY_MS)}),
        # a burst of deaths waits here for the budget: days, not hours, of room
        NewTopic(topics.confirmations, n, rf, topic_configs={"retention.ms": str(7 * DAY_MS)}),
    ]


async def create_topics(admin: AIOKafkaAdminClient, new: Sequence[NewTopic]) -> list[str]:
    """Creates the topics of ``new`` that do not exist yet; returns the names it created."""
    created = []
    response = await admin.create_topics(list(new))
    for topic, code, *rest in response.topic_errors:
        if code == 0:
            created.append(topic)
            continue
        exc = for_code(code)
        if exc is TopicAlreadyExistsError:
            continue
        message = rest[0] if rest and rest[0] else exc.__name__
        raise EventLogError(
            f"Kafka: create topic {topic}: {exc.__name__}: {message}",
            retriable=bool(getattr(exc, "retriable", False)),
        )
    return created


async def wait_for_leaders(describe: Describe, topics: list[str], timeout: float = 15.0) -> None:
    """Until every partition of ``topics`` has a leader (a new topic takes a moment)."""
    deadline = time.monotonic() + timeout
    while True:
        described = await describe(topics)
        if all(
            t["error_code"] == 0
            and t["partitions"]
            and all(p["leader"] >= 0 for p in t["partitions"])
            for t in described
        ):
            return
        if time.monotonic() > deadline:
            raise EventLogError(f"Kafka: topics {topics} have no leader yet", retriable=True)
        await asyncio.sleep(0.1)
