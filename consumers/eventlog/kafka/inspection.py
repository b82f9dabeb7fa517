"""Which topics a Kafka cluster holds, asked with one metadata request for every topic (a
request naming topics may create them on a broker with ``auto.create.topics.enable``), on an
admin client of its own: no producer, no consumer, nothing created (``auditrec doctor``)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from consumers.eventlog.kafka.clients import bootstrap_servers, connection_options
from consumers.eventlog.kafka.errors import translate

if TYPE_CHECKING:
    from consumers.runtime.settings import Settings

__all__ = ["list_topics"]


async def list_topics(url: str, settings: Settings, *, timeout: float = 5.0) -> set[str]:
    """The names of the cluster's topics; :class:`~statemachine.errors.EventLogError` when
    the brokers cannot be reached within ``timeout`` seconds."""
    bootstrap = bootstrap_servers(url)
    conn = connection_options(
        bootstrap,
        int(timeout * 1000),
        protocol=settings.kafka_security_protocol,
        mechanism=settings.kafka_sasl_mechanism,
        username=settings.kafka_sasl_username,
        password=settings.kafka_sasl_password,
        cafile=settings.kafka_ssl_cafile,
        certfile=settings.kafka_ssl_certfile,
        keyfile=settings.kafka_ssl_keyfile,
    )
    admin = AIOKafkaAdminClient(client_id="auditrec-doctor", **conn)
    try:
        with translate(f"list topics on {','.join(bootstrap)}"):
            async with asyncio.timeout(timeout):
                await admin.start()
                return set(await admin.list_topics())
    finally:
        with contextlib.suppress(KafkaError, OSError):
            await admin.close()
