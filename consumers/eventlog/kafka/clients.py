"""The Kafka log's aiokafka clients: where they connect (the bootstrap servers of a
``kafka://`` URL), the connection and security options (SASL, TLS) that its producers,
consumers and admin client share, and how its producers and consumers are made: producers
idempotent with ``acks=all``, consumers ``read_committed`` without auto-commit, reading from
the earliest offset when their group has none, their records made as the port's
(``fetching.py``). Credentials never come from the URL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.helpers import create_ssl_context

from consumers.eventlog.kafka.fetching import as_record, install
from statemachine.errors import ConfigError

__all__ = [
    "bootstrap_servers",
    "connection_options",
    "consumer_settings",
    "new_consumer",
    "new_producer",
    "producer_settings",
]

_FETCH_OPTIONS: dict[str, Any] = {
    "max_partition_fetch_bytes": 4 * 1024 * 1024,
    "fetch_max_bytes": 64 * 1024 * 1024,
}


def bootstrap_servers(url: str) -> list[str]:
    """``kafka://h1:9092,h2`` → ``["h1:9092", "h2:9092"]``."""
    rest = url.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0]
    if "@" in rest:  # never echo the URL: it may hold a secret
        raise ConfigError("AUDITREC_EVENT_LOG_URL: credentials go in AUDITREC_KAFKA_SASL_*")
    hosts = [h.strip() for h in rest.split(",") if h.strip()]
    if not hosts:
        raise ConfigError("AUDITREC_EVENT_LOG_URL: no Kafka host in kafka:// URL")
    return [h if ":" in h.rsplit("]", 1)[-1] else f"{h}:9092" for h in hosts]


def connection_options(
    bootstrap: list[str],
    request_timeout_ms: int,
    *,
    protocol: str,
    mechanism: str | None,
    username: str | None,
    password: Any,
    cafile: Any,
    certfile: Any,
    keyfile: Any,
) -> dict[str, Any]:
    """The options every client of the log gets; ``password`` may be a ``SecretStr``. The SASL
    options are set only with a password or a mechanism, TLS only for an ``*SSL`` protocol."""
    if hasattr(password, "get_secret_value"):
        password = password.get_secret_value()
    conn: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "security_protocol": protocol,
        "request_timeout_ms": request_timeout_ms,
    }
    if mechanism:
        conn["sasl_mechanism"] = mechanism
    if password is not None or mechanism:
        conn["sasl_plain_username"] = username
        conn["sasl_plain_password"] = password
    if "SSL" in protocol:
        try:
            conn["ssl_context"] = create_ssl_context(
                cafile=cafile, certfile=certfile, keyfile=keyfile
            )
        except OSError as exc:  # ssl.SSLError too
            raise ConfigError(f"AUDITREC_KAFKA_SSL_*: cannot load TLS files: {exc}") from None
    return conn


def consumer_settings(overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """The consumers' aiokafka settings: group timing and fetch sizes; ``overrides`` win."""
    return {
        "session_timeout_ms": 10_000,
        "heartbeat_interval_ms": 1_000,
        **_FETCH_OPTIONS,
        **(overrides or {}),
    }


def producer_settings(overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """The producers' aiokafka settings: batching; ``overrides`` win."""
    return {
        "linger_ms": 5,
        "max_batch_size": 512 * 1024,
        **(overrides or {}),
    }


def new_producer(
    client_id: str, conn: Mapping[str, Any], options: Mapping[str, Any], extra: Mapping[str, Any]
) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        client_id=client_id,
        enable_idempotence=True,
        acks="all",
        **conn,
        **options,
        **extra,
    )


def new_consumer(
    client_id: str,
    group: str | None,
    conn: Mapping[str, Any],
    options: Mapping[str, Any],
    extra: Mapping[str, Any],
) -> AIOKafkaConsumer:
    install()  # its records are made as the port's (fetching.py)
    return AIOKafkaConsumer(
        client_id=client_id,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        value_deserializer=as_record,
        **conn,
        **options,
        **extra,
    )
