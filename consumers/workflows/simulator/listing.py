"""The simulator's instance listing (``GET …/workflows/{name}/instances``): the query it takes,
and a page of instances by creation time with a cursor to the next page.

Instances are ordered by creation time (``direction``, default ``asc``), filtered by
``status`` and by ``date_start``/``date_end`` on ``created_on``; ``cursor`` pages are stable
while the filter's instances do not change. A query the API would refuse raises
:class:`ValueError` with the API's message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from consumers.workflows.simulator.state import STATUSES, Instance

__all__ = ["ListingQuery", "page_of"]

_CURSOR_PREFIX = "c1."


@dataclass(frozen=True)
class ListingQuery:
    status: str | None
    start: datetime | None
    end: datetime | None
    per_page: int
    offset: int
    descending: bool

    @classmethod
    def parse(cls, q: Mapping[str, str]) -> ListingQuery:
        wanted = q.get("status")
        if wanted is not None and wanted not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}")
        if q.get("direction", "asc") not in ("asc", "desc"):
            raise ValueError("direction must be asc or desc")
        if "cursor" in q and "page" in q:
            raise ValueError("cursor and page are mutually exclusive")
        start, end = _date(q.get("date_start")), _date(q.get("date_end"))
        per_page = max(1, min(int(q.get("per_page", 50)), 100))
        page_no = max(int(q.get("page", 1)), 1)
        offset = _offset(q["cursor"]) if "cursor" in q else (page_no - 1) * per_page
        return cls(wanted, start, end, per_page, offset, q.get("direction") == "desc")


def page_of(
    instances: Mapping[str, Instance], workflow: str, query: ListingQuery
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The page's instance summaries and its ``result_info`` (with the next page's cursor)."""
    rows = sorted(
        (
            i
            for i in instances.values()
            if (query.status is None or i.status == query.status)
            and (query.start is None or i.queued >= query.start)
            and (query.end is None or i.queued <= query.end)
        ),
        key=lambda i: (i.queued, i.id),
        reverse=query.descending,
    )
    offset, per_page = query.offset, query.per_page
    page = rows[offset : offset + per_page]
    info: dict[str, Any] = {"page": offset // per_page + 1, "per_page": per_page,
                            "count": len(page), "total_count": len(rows)}  # fmt: skip
    if offset + per_page < len(rows):
        info["cursor"] = _CURSOR_PREFIX + str(offset + per_page)
    return [i.summary(workflow) for i in page], info


def _offset(cursor: str) -> int:
    if not cursor.startswith(_CURSOR_PREFIX) or not cursor[len(_CURSOR_PREFIX) :].isdigit():
        raise ValueError("cursor is not one this API gave")
    return int(cursor[len(_CURSOR_PREFIX) :])


def _date(value: str | None) -> datetime | None:
    """``date_start``/``date_end``: ISO 8601 in UTC (no offset, or ``Z``)."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value.removesuffix("Z"))
    except ValueError:
        raise ValueError(f"{value[:40]!r} is not an ISO 8601 date") from None
    if parsed.tzinfo is not None:
        raise ValueError("dates take no timezone offset: give them in UTC")
    return parsed.replace(tzinfo=UTC)
