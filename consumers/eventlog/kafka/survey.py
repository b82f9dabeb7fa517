"""What ``auditrec doctor`` asks a Kafka cluster, read only, on clients of its own (no
producer, no consumer group, nothing created):

- the topics, with one metadata request for every topic (a request naming topics may create
  them on a broker with ``auto.create.topics.enable``);
- the first record stamped at or after a time, per partition (``ListOffsets`` by timestamp),
  to find records stamped ahead of this machine's clock.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition

from consumers.eventlog.kafka.clients import bootstrap_servers, connection_options
from consumers.eventlog.kafka.errors import translate

if TYPE_CHECKING:
    from consumers.runtime.settings import Settings

__all__ = ["first_stamped_after", "list_topics"]

_CLIENT_ID = "auditrec-doctor"


def _connection(url: str, settings: Settings, timeout: float) -> dict[str, Any]:
    return connection_options(
        bootstrap_servers(url),
        int(timeout * 1000),
        protocol=settings.kafka_security_protocol,
        mechanism=settings.kafka_sasl_mechanism,
        username=settings.kafka_sasl_username,
        password=settings.kafka_sasl_password,
        cafile=settings.kafka_ssl_cafile,
        certfile=settings.kafka_ssl_certfile,
        keyfile=settings.kafka_ssl_keyfile,
    )


async def _topics(url: str, settings: Settings, timeout: float) -> dict[str, list[int]]:
    conn = _connection(url, settings, timeout)
    admin = AIOKafkaAdminClient(client_id=_CLIENT_ID, **conn)
    try:
        with translate(f"list topics on {','.join(conn['bootstrap_servers'])}"):
            async with asyncio.timeout(timeout):
                await admin.start()
                described = await admin.describe_topics()  # every topic: none named
    finally:
        with contextlib.suppress(KafkaError, OSError):
            await admin.close()
    return {
        t["topic"]: sorted(p["partition"] for p in t["partitions"])
        for t in described
        if t["error_code"] == 0
    }


async def list_topics(url: str, settings: Settings, *, timeout: float = 5.0) -> set[str]:
    """The names of the cluster's topics; :class:`~statemachine.errors.EventLogError` when
    the brokers cannot be reached within ``timeout`` seconds."""
    return set(await _topics(url, settings, timeout))


async def first_stamped_after(
    url: str, settings: Settings, topics: Iterable[str], at_ms: int, *, timeout: float = 5.0
) -> tuple[str, int] | None:
    """A record of ``topics`` (those that exist) stamped at or after ``at_ms``: its topic and
    timestamp (the latest such first record of any partition); ``None`` when there is none."""
    present = await _topics(url, settings, timeout)
    wanted = {TopicPartition(t, p): at_ms for t in topics for p in present.get(t, [])}
    if not wanted:
        return None
    conn = _connection(url, settings, timeout)
    meta = AIOKafkaConsumer(client_id=_CLIENT_ID, enable_auto_commit=False, **conn)
    try:
        with translate("offsets by timestamp"):
            async with asyncio.timeout(timeout):
                await meta.start()
                found = await meta.offsets_for_times(wanted)
    finally:
        with contextlib.suppress(KafkaError, OSError):
            await meta.stop()
    stamped = [(tp.topic, ot.timestamp) for tp, ot in found.items() if ot is not None]
    return max(stamped, key=lambda s: s[1]) if stamped else None
