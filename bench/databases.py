"""What the benchmarks share: a PostgreSQL database of a run's own, dropped afterwards (the
projection's tables are not namespaced by topic prefix, so runs must not share one)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

import asyncpg

__all__ = ["fresh_database"]


@contextlib.asynccontextmanager
async def fresh_database(admin_url: str) -> AsyncIterator[str]:
    """A new database on the server of ``admin_url``; yields its URL, drops it on exit."""
    name = f"bench_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    try:
        yield admin_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        conn = await asyncpg.connect(admin_url)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()
