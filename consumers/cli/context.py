"""What every command shares: the settings (read once), running a coroutine, the backends
started for one command, audit-id checks, and turning errors into messages and exit codes
(0 ok, 1 runtime failure, 2 invalid input)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Coroutine
from functools import wraps
from typing import Any, TypeVar

import click

from consumers.cli.output import err
from consumers.runtime.logs import configure_logging
from consumers.runtime.settings import Settings, load_settings
from statemachine.errors import AuditrecError, ConfigError, InvalidInput
from statemachine.vocabulary import AUDIT_ID_RULE, is_audit_id

__all__ = ["check_audit_id", "handle_errors", "run", "settings_of", "with_backends"]

T = TypeVar("T")


def settings_of(ctx: click.Context) -> Settings:
    """The settings, read once (pydantic-settings: environment and flags), and the logging
    they ask for. Commands that print data log warnings only unless a level is set."""
    obj = ctx.ensure_object(dict)
    if "settings" not in obj:
        settings = load_settings(**obj.get("overrides", {}))
        level = settings.log_level if "log_level" in settings.model_fields_set else None
        configure_logging(level or obj.get("default_level", "INFO"), settings.log_format)
        obj["settings"] = settings
    result: Settings = obj["settings"]
    return result


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except InvalidInput as exc:
            if exc.problems != [str(exc)]:
                for problem in exc.problems:
                    err.print(problem, markup=False)
            err.print(f"error: {exc}", markup=False)
            sys.exit(2)
        except AuditrecError as exc:
            err.print(f"error: {exc}", markup=False)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            sys.exit(130)

    return wrapper


def check_audit_id(audit_id: str) -> None:
    if not is_audit_id(audit_id):
        raise InvalidInput(f"invalid audit id {audit_id!r}: {AUDIT_ID_RULE}")


async def with_backends(
    settings: Settings,
    fn: Callable[[Any], Awaitable[T]],
    *,
    log: bool = True,
    store: bool = True,
    init: bool = True,
    read_only: bool = False,
) -> T:
    """Run ``fn`` on started backends; ``log=False`` for commands that only read the
    projection (they then work while the event log is unreachable), ``store=False`` for those
    that only write to the log (``publish`` works while the database is down); ``init=False``
    creates no topics or tables; ``read_only``: neither, and refuse (naming ``auditrec init``)
    a database never initialised or of an older schema rather than create or migrate it."""
    from consumers.operations.backends import Backends

    if read_only:
        await _initialised(settings)
        init = False
    backends = Backends(settings)
    await backends.start(with_log=log, with_store=store, init=init)
    try:
        return await fn(backends)
    finally:
        await backends.stop()


async def _initialised(settings: Settings) -> None:
    from projections.factory import schema_state

    state = await schema_state(settings.database_url)
    if state.found is None:
        raise ConfigError(
            "the database holds no auditrec projection (AUDITREC_DATABASE_URL): run "
            "`auditrec init` first"
        )
    if state.found < state.current:
        raise ConfigError(
            f"the projection's schema is version {state.found}; this release reads version "
            f"{state.current}: run `auditrec init` to migrate it"
        )
