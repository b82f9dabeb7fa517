"""The PostgreSQL connection every adapter of the store shares: one asyncpg pool, the schema
its connections work in, and the translation of driver errors into
:class:`~statemachine.errors.StoreError` (``errors.py``) naming the server and schema but
never the user or password.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
from collections.abc import Iterator
from typing import NoReturn

import asyncpg

from projections.postgres.errors import DRIVER_ERRORS, describe_url, redact, translate
from projections.postgres.rows import init_connection
from statemachine.errors import StoreError

__all__ = ["PostgresDB", "advisory_key"]

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def advisory_key(purpose: str, schema: str) -> int:
    """The advisory-lock key for ``purpose`` in ``schema``: each deployment has its own."""
    digest = hashlib.blake2b(f"auditrec:{purpose}:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class PostgresDB:
    def __init__(
        self,
        url: str,
        *,
        schema: str = "public",
        min_size: int = 1,
        max_size: int = 10,
        command_timeout: float | None = 60.0,
    ) -> None:
        if not _IDENTIFIER.match(schema):
            raise StoreError(f"invalid PostgreSQL schema name {schema!r}", retriable=False)
        self.url = url
        self.schema = schema
        self.where, self._password = describe_url(url)
        self._min_size = min_size
        self._max_size = max_size
        self._command_timeout = command_timeout
        self._pool: asyncpg.Pool | None = None

    def __repr__(self) -> str:
        return f"PostgresStore({self.where!r}, schema={self.schema!r})"

    def fail(self, what: str, exc: BaseException) -> NoReturn:
        raise translate(
            exc, what, where=self.where, schema=self.schema, password=self._password
        ) from exc

    @contextlib.contextmanager
    def errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except StoreError:
            raise
        except DRIVER_ERRORS as exc:
            self.fail(what, exc)

    @property
    def opened(self) -> bool:
        return self._pool is not None

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StoreError(f"{self!r} is not started", retriable=False)
        return self._pool

    async def open(self) -> None:
        """Create the pool (the caller makes sure it is not open)."""
        with self.errors("connect"):
            try:
                self._pool = await asyncpg.create_pool(
                    self.url,
                    min_size=self._min_size,
                    max_size=self._max_size,
                    command_timeout=self._command_timeout,
                    server_settings={
                        "search_path": f'"{self.schema}"',
                        "application_name": "auditrec",
                    },
                    init=init_connection,
                )
            except ValueError as exc:  # a malformed URL: say so without echoing it
                raise StoreError(
                    f"PostgreSQL {self.where}: invalid database URL "
                    f"({redact(str(exc), self._password)})",
                    retriable=False,
                ) from None

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        try:
            await asyncio.wait_for(pool.close(), timeout=10)
        except (TimeoutError, asyncpg.InterfaceError, OSError):
            pool.terminate()
