"""Picks the projection store adapter by URL scheme (kept apart from the port, so adapters
import the port and never the reverse). The adapter is imported when chosen."""

from __future__ import annotations

from typing import Any

from projections.store import ProjectionStore
from projections.values import SchemaState
from statemachine.errors import ConfigError

__all__ = ["open_store", "schema_state"]


def open_store(url: str, **options: Any) -> ProjectionStore:
    """The adapter for ``url``: ``sqlite:///path`` or ``postgresql://…``."""
    if url.startswith("sqlite://"):
        from projections.sqlite.store import SQLiteStore

        return SQLiteStore(url)
    if url.startswith(("postgresql://", "postgres://")):
        from projections.postgres.store import PostgresStore

        return PostgresStore(url, **options)
    raise ConfigError(f"AUDITREC_DATABASE_URL: unsupported scheme {url.split('://')[0]!r}")


async def schema_state(url: str, *, timeout: float = 5.0) -> SchemaState:
    """The schema version the database at ``url`` holds, read without creating or migrating
    anything (``auditrec doctor``); raises :class:`~statemachine.errors.StoreError` when it
    cannot be read."""
    if url.startswith("sqlite://"):
        from projections.sqlite import inspection as sqlite_inspection

        return await sqlite_inspection.schema_state(url)
    if url.startswith(("postgresql://", "postgres://")):
        from projections.postgres import inspection as postgres_inspection

        return await postgres_inspection.schema_state(url, timeout=timeout)
    raise ConfigError(f"AUDITREC_DATABASE_URL: unsupported scheme {url.split('://')[0]!r}")
