"""The PostgreSQL projection's schema version, read on one plain connection (a store's
``start`` would create the schema and migrate it)."""

from __future__ import annotations

import asyncpg

from projections.postgres.errors import DRIVER_ERRORS, describe_url, translate
from projections.postgres.schema import SCHEMA_VERSION
from projections.values import SchemaState
from statemachine.errors import StoreError

__all__ = ["schema_state"]


async def schema_state(url: str, *, schema: str = "public", timeout: float = 5.0) -> SchemaState:
    """The highest version in ``schema_migrations`` of ``schema``; ``found=None`` when the
    table is missing. An unreachable server raises a retriable
    :class:`~statemachine.errors.StoreError` that never shows the password."""
    where, password = describe_url(url)
    try:
        conn = await asyncpg.connect(url, timeout=timeout, command_timeout=timeout)
    except DRIVER_ERRORS as exc:
        raise translate(exc, "connect", where=where, schema=schema, password=password) from None
    except ValueError:  # a malformed URL: say so without echoing it
        raise StoreError(f"PostgreSQL {where}: invalid database URL", retriable=False) from None
    try:
        table = await conn.fetchval("SELECT to_regclass($1)", f'"{schema}".schema_migrations')
        if table is None:
            return SchemaState(None, SCHEMA_VERSION)
        found = await conn.fetchval(f'SELECT max(version) FROM "{schema}".schema_migrations')
    except DRIVER_ERRORS as exc:
        raise translate(exc, "read the schema version", where=where, schema=schema,
                        password=password) from None  # fmt: skip
    finally:
        await conn.close(timeout=timeout)
    return SchemaState(None if found is None else int(found), SCHEMA_VERSION)
