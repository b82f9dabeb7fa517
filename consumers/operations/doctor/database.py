"""The database check: reachable, and its schema version present and current. The version is
read on a plain connection: starting a projection store would create or migrate the schema.
A SQLite file is named by its absolute path (a relative URL also says how to write it
absolute)."""

from __future__ import annotations

from consumers.operations.doctor.files import absolute_advice, resolved_path
from consumers.operations.doctor.report import CHECK_TIMEOUT, Check
from consumers.runtime.settings import Settings
from projections.factory import schema_state
from statemachine.errors import AuditrecError

__all__ = ["check_database"]

NAME = "database"


async def check_database(settings: Settings, timeout: float = CHECK_TIMEOUT) -> Check:
    url = settings.database_url
    path = resolved_path(url)
    where = "PostgreSQL" if path is None else f"SQLite {path}"
    init = "run `auditrec init`" if path is None else f"run `auditrec init` (it creates {path})"
    if (advice := absolute_advice(url, "AUDITREC_DATABASE_URL")) is not None:
        init = f"{advice}; else {init}"
    try:
        state = await schema_state(url, timeout=timeout)
    except AuditrecError as exc:
        return Check(
            NAME,
            False,
            f"{where} unreachable: {exc}",
            "check AUDITREC_DATABASE_URL and that the database is up",
        )
    if state.found is None:
        return Check(NAME, False, f"{where}: not initialised", init)
    if state.found < state.current:
        return Check(
            NAME,
            False,
            f"{where} reachable; schema version {state.found}, this release uses {state.current}",
            "run `auditrec init` (it migrates the schema)",
        )
    if state.found > state.current:
        return Check(
            NAME,
            False,
            f"{where} reachable; schema version {state.found} is newer than this release's "
            f"{state.current}",
            "run the auditrec release that migrated it",
        )
    return Check(NAME, True, f"{where} reachable; schema version {state.found} (current)")
