"""Where the real test services are, and what to do when one is missing.

``kafka_bootstrap()`` and ``postgres_url()`` return the address of a reachable service. When
it is unreachable the test fails if services are required (``CI`` set, or
``AUDITREC_REQUIRE_SERVICES=1``: a Kafka or PostgreSQL test that silently skips in CI is a
failure, DESIGN §8) and is skipped otherwise, saying how to start the services.
"""

from __future__ import annotations

import os
import socket
from functools import cache
from urllib.parse import urlsplit

import pytest

__all__ = ["kafka_bootstrap", "postgres_url", "services_required"]

DEFAULT_KAFKA = "127.0.0.1:9092"
DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"
_HINT = "start it with `make services-up` (or `bash scripts/services.sh up`)"


def services_required() -> bool:
    ci = os.environ.get("CI", "").strip().lower()
    return ci not in ("", "0", "false", "no") or os.environ.get("AUDITREC_REQUIRE_SERVICES") == "1"


@cache
def _reachable(host: str, port: int) -> str | None:
    """``None`` when ``host:port`` accepts a TCP connection within 2 s, else why not."""
    try:
        with socket.create_connection((host, port), timeout=2.0):
            return None
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"


def _require(what: str, host: str, port: int, shown: str) -> None:
    problem = _reachable(host, port)
    if problem is None:
        return
    message = f"{what} is not reachable at {shown} ({problem}); {_HINT}"
    if services_required():
        pytest.fail(
            f"{message} [services are required: CI or AUDITREC_REQUIRE_SERVICES=1]", pytrace=False
        )
    pytest.skip(message)


def kafka_bootstrap() -> str:
    """``host:port[,host:port]`` of the test broker (env ``AUDITREC_TEST_KAFKA``)."""
    raw = os.environ.get("AUDITREC_TEST_KAFKA", DEFAULT_KAFKA).strip()
    if "://" in raw:
        raw = raw.split("://", 1)[1]
    servers = raw.rstrip("/")
    first = servers.split(",")[0]
    host, _, port = first.rpartition(":")
    if not host:
        host, port = first, "9092"
    _require("Kafka", host.strip("[]"), int(port), servers)
    return servers


def postgres_url() -> str:
    """The test server's URL (env ``AUDITREC_TEST_DATABASE_URL``)."""
    url = os.environ.get("AUDITREC_TEST_DATABASE_URL", DEFAULT_POSTGRES).strip()
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    shown = f"{parts.scheme}://{host}:{parts.port or 5432}{parts.path}"  # no password
    _require("PostgreSQL", host, parts.port or 5432, shown)
    return url
