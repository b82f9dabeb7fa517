"""Listing audits, newest first, a page at a time: the filters the CLI and the API share and
the opaque keyset cursor of the next page."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Final, Literal

from projections.audits import AuditReads
from projections.row import AuditRow
from statemachine.errors import InvalidInput
from statemachine.machine import INITIAL, STATES

__all__ = [
    "AUDIT_STATUSES",
    "AuditFilter",
    "Page",
    "StatusName",
    "decode_cursor",
    "encode_cursor",
    "list_page",
    "matching",
]

# The statuses an audit can be in, as filters offer them: the machine's states but the initial
# one ("no audit yet").
AUDIT_STATUSES: Final[tuple[str, ...]] = tuple(s for s in STATES if s != INITIAL)
if TYPE_CHECKING:  # a Literal built at run time is no type to mypy
    StatusName = str
else:  # the API's models and query parameters validate against (and document) the list
    StatusName = Literal[AUDIT_STATUSES]


@dataclass(frozen=True)
class AuditFilter:
    status: str | None = None
    project: str | None = None
    code: str | None = None
    older_than: timedelta | None = None  # started longer ago than this
    shadow: bool = False  # still running, but shadow mode recorded a failure it would make


@dataclass(frozen=True)
class Page:
    rows: list[AuditRow]
    next_cursor: str | None  # None: the last page


async def list_page(
    audits: AuditReads,
    where: AuditFilter,
    limit: int,
    cursor: str | None,
    now: datetime,
    *,
    cursor_name: str = "cursor",
) -> Page:
    after = decode_cursor(cursor, cursor_name) if cursor else None
    rows = await audits.list_audits(
        status=where.status,
        project=where.project,
        code=where.code,
        started_before=now - where.older_than if where.older_than is not None else None,
        limit=limit + 1,
        after=after,
        shadow=where.shadow,
    )
    page = rows[:limit]
    more = len(rows) > limit and bool(page)
    return Page(page, encode_cursor(page[-1]) if more else None)


async def matching(
    audits: AuditReads, where: AuditFilter, now: datetime, limit: int, *, page: int = 500
) -> tuple[list[AuditRow], bool]:
    """Every audit ``where`` selects, newest first, at most ``limit`` (a bulk action's
    selection), and whether more matched."""
    started_before = now - where.older_than if where.older_than is not None else None
    rows: list[AuditRow] = []
    after: tuple[datetime, str] | None = None
    while len(rows) <= limit:
        batch = await audits.list_audits(
            status=where.status,
            project=where.project,
            code=where.code,
            started_before=started_before,
            limit=page,
            after=after,
            shadow=where.shadow,
        )
        rows.extend(batch)
        last = batch[-1].state.started_at if batch else None
        if len(batch) < page or last is None:
            break
        after = (last, batch[-1].audit_id)
    return rows[:limit], len(rows) > limit


def encode_cursor(row: AuditRow) -> str:
    started = row.state.started_at
    raw = json.dumps([started.isoformat() if started else None, row.audit_id])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, name: str = "cursor") -> tuple[datetime, str]:
    problem = InvalidInput(
        "invalid cursor", [f"{name}: not a cursor a previous page of audits returned"]
    )
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        raw = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
        started, audit_id = raw
        if not isinstance(started, str) or not isinstance(audit_id, str):
            raise ValueError("cursor fields")
        at = datetime.fromisoformat(started)
    except (ValueError, TypeError, binascii.Error, UnicodeError, RecursionError):
        raise problem from None
    if at.tzinfo is None:
        raise problem
    return at, audit_id
