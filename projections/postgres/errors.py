"""Translating PostgreSQL driver errors into :class:`StoreError`: which ones are retriable, and
messages that name the server and schema but never the user or password.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

import asyncpg

from statemachine.errors import StoreError

__all__ = ["DRIVER_ERRORS", "describe_url", "redact", "translate"]

# SQLSTATEs worth retrying: connection (08), transaction rollback (40: serialization failure,
# deadlock), insufficient resources (53), operator intervention (57: shutdown, cancel,
# cannot connect now), lock not available, system errors (58), read-only after a failover.
_RETRIABLE_PREFIXES = ("08", "40", "53", "57", "58")
_RETRIABLE_STATES = frozenset({"55P03", "25006"})
DRIVER_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
    OSError,
    TimeoutError,
)
# A concurrent writer recorded the same event / inserted the same audit first.
_CONCURRENT_WRITE = frozenset(
    {"audit_events_event_audit_key", "audit_events_event_id_key", "audits_pkey"}
)

_PASSWORD = re.compile(r"^[a-z]+://[^:/@]*:([^@/]*)@", re.IGNORECASE)


def describe_url(url: str) -> tuple[str, str | None]:
    """``host:port/db`` for error messages (never user or password), and the password."""
    found = _PASSWORD.match(url)
    password = unquote(found.group(1)) if found and found.group(1) else None
    try:
        parts = urlsplit(url)
        return f"{parts.hostname or 'localhost'}:{parts.port or 5432}{parts.path or '/'}", password
    except ValueError:
        return "postgresql://…", password


def redact(text: str, password: str | None) -> str:
    return text.replace(password, "***") if password else text


def translate(
    exc: BaseException, what: str, *, where: str, schema: str, password: str | None
) -> StoreError:
    """The :class:`StoreError` for a driver error ``exc`` met while doing ``what``."""
    retriable = False
    if isinstance(exc, asyncpg.PostgresError):
        state = exc.sqlstate or ""
        retriable = state.startswith(_RETRIABLE_PREFIXES) or state in _RETRIABLE_STATES
        if state == "23505" and getattr(exc, "constraint_name", None) in _CONCURRENT_WRITE:
            retriable = True
            what = f"{what} (a concurrent writer applied the same audits)"
    elif isinstance(
        exc,
        OSError
        | TimeoutError
        | asyncpg.exceptions.ConnectionDoesNotExistError
        | asyncpg.exceptions.InternalClientError,
    ):
        retriable = True
    detail = redact(f"{type(exc).__name__}: {exc}", password)
    return StoreError(
        f"PostgreSQL {where} (schema {schema}): {what}: {detail}", retriable=retriable
    )
