"""Listing audits a page at a time: the filters the CLI, the API and the console share (one
vocabulary: ``status``, ``project``, ``code``, ``running_longer_than``, ``shadow``, ``held``,
``workflow``, ``stalled`` and the search ``q``), the orders a list can be in, the total, and
the opaque keyset cursors of the next and the previous page."""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Literal

from projections.audits import SORTS, AuditReads, sort_key
from projections.row import AuditRow
from statemachine.errors import InvalidInput
from statemachine.machine import INITIAL, RUNNING, STATES
from statemachine.policy import parse_duration

__all__ = [
    "AUDIT_STATUSES",
    "MAX_QUERY",
    "ORDERS",
    "SORTS",
    "WORKFLOW_PATTERN",
    "AuditFilter",
    "Order",
    "Page",
    "SortName",
    "StatusName",
    "decode_cursor",
    "encode_cursor",
    "list_page",
    "matching",
    "parse_filter",
]

# The statuses an audit can be in, as filters offer them: the machine's states but the initial
# one ("no audit yet").
AUDIT_STATUSES: Final[tuple[str, ...]] = tuple(s for s in STATES if s != INITIAL)
ORDERS: Final[tuple[str, ...]] = ("desc", "asc")
if TYPE_CHECKING:  # a Literal built at run time is no type to mypy
    StatusName = str
    SortName = str
    Order = str
else:  # the API's models and query parameters validate against (and document) the list
    StatusName = Literal[AUDIT_STATUSES]
    SortName = Literal[SORTS]
    Order = Literal[ORDERS]
MAX_QUERY = 2048  # characters of a search
# A Cloudflare workflow's name, as an audit's start may give it (statemachine.values).
WORKFLOW_PATTERN: Final = r"^[A-Za-z0-9_-]{1,64}$"
_WORKFLOW = re.compile(WORKFLOW_PATTERN)


@dataclass(frozen=True)
class AuditFilter:
    status: str | None = None
    project: str | None = None
    code: str | None = None
    older_than: timedelta | None = None  # started longer ago than this
    shadow: bool = False  # still running, but shadow mode recorded a failure it would make
    held: bool | None = None  # a decision held by the mass-failure brake (or none)
    q: str | None = None  # an audit id, an instance id, a project id, a start URL's beginning
    workflow: str | None = None  # the audits of this workflow
    # AUDITREC_CLOUDFLARE_WORKFLOW: its audits include those that name no workflow
    default_workflow: str | None = None
    stalled: bool | None = None  # a stall verdict recorded (stalled_at set), or none

    def store_filters(self, now: datetime) -> dict[str, Any]:
        return {
            "status": self.status,
            "project": self.project,
            "code": self.code,
            "started_before": now - self.older_than if self.older_than is not None else None,
            "shadow": self.shadow,
            "held": self.held,
            "q": self.q,
            "workflow": self.workflow,
            "default_workflow": self.default_workflow if self.workflow is not None else None,
            "stalled": self.stalled,
        }


def parse_filter(
    problems: list[str],
    *,
    status: str | None = None,
    project: str | None = None,
    code: str | None = None,
    running_longer_than: str | None = None,
    older_than: str | None = None,
    shadow: bool = False,
    held: bool | None = None,
    q: str | None = None,
    workflow: str | None = None,
    stalled: bool | None = None,
    default_workflow: str | None = None,
    names: dict[str, str] | None = None,
) -> AuditFilter:
    """The filter the three front ends mean by the same names; a bad value is named in
    ``problems`` by its front end's name for it (``names``: ``--running-longer-than``,
    ``query.running_longer_than``). ``running_longer_than``: running audits started longer
    ago than this (it implies ``status`` running, and refuses another status); ``shadow``
    too implies running. ``older_than`` is its older name, kept as it was: started longer ago
    than this, in any status. ``workflow``: the audits of this workflow, those naming none
    too when it is ``default_workflow`` (``AUDITREC_CLOUDFLARE_WORKFLOW``); ``stalled``:
    those with a stall verdict recorded (or only the others)."""
    called = names or {}
    longer = called.get("running_longer_than", "running_longer_than")
    older_name = called.get("older_than", "older_than")
    older: timedelta | None = None
    for name, text in ((longer, running_longer_than), (older_name, older_than)):
        if text:
            try:
                older = parse_duration(text)
            except ValueError as exc:
                problems.append(f"{name}: {exc}")
    if running_longer_than and older_than:
        problems.append(f"{older_name}: the older name of {longer}: give one")
    if running_longer_than and status and status != RUNNING:
        problems.append(f"{longer}: only for running audits (status running)")
    search = (q or "").strip()
    if len(search) > MAX_QUERY:
        problems.append(f"{called.get('q', 'q')}: at most {MAX_QUERY} characters")
    if workflow and not _WORKFLOW.match(workflow):
        problems.append(
            f"{called.get('workflow', 'workflow')}: a workflow's name, 1 to 64 letters, digits, "
            f"'_' or '-', not {workflow[:40]!r}"
        )
    return AuditFilter(
        status=status or (RUNNING if running_longer_than or shadow else None),
        project=project or None,
        code=code or None,
        older_than=older,
        shadow=shadow,
        held=held,
        q=search or None,
        workflow=workflow or None,
        default_workflow=default_workflow,
        stalled=stalled,
    )


@dataclass(frozen=True)
class Page:
    rows: list[AuditRow]
    next_cursor: str | None  # None: the last page
    prev_cursor: str | None = None  # None: the first page
    total: int | None = None  # every audit the filter selects


async def list_page(
    audits: AuditReads,
    where: AuditFilter,
    limit: int,
    cursor: str | None,
    now: datetime,
    *,
    cursor_name: str = "cursor",
    sort: str = "started",
    order: str = "desc",
    total: bool = False,
) -> Page:
    """One page in the order ``sort``/``order``; ``cursor`` (a ``next_cursor`` or a
    ``prev_cursor`` of this listing) says where. ``total``: count every audit ``where``
    selects too."""
    if sort not in SORTS:
        raise InvalidInput("invalid sort", [f"sort: one of {', '.join(SORTS)}, not {sort[:40]!r}"])
    if order not in ORDERS:
        raise InvalidInput("invalid order", [f"order: asc or desc, not {order[:40]!r}"])
    descending = order == "desc"
    at = decode_cursor(cursor, cursor_name, sort, order) if cursor else None
    # The ages of unfinished audits end at the first page's time on every page, so that
    # their order holds from page to page.
    since = at.now if at is not None and at.now is not None else now
    backwards = at is not None and at.backwards
    rows = await audits.list_audits(
        **where.store_filters(now),
        limit=limit + 1,
        after=at.key if at is not None else None,
        sort=sort,
        descending=descending,
        backwards=backwards,
        now=since,
    )
    more = len(rows) > limit
    rows = rows[:limit]
    if backwards:
        rows.reverse()
    before = more if backwards else at is not None
    beyond = at is not None if backwards else more

    def mark(row: AuditRow, back: bool) -> str:
        return encode_cursor(sort_key(row, sort, descending, since), sort, order, since, back)

    count = await audits.count_audits(**where.store_filters(now)) if total else None
    return Page(
        rows,
        mark(rows[-1], False) if beyond and rows else None,
        mark(rows[0], True) if before and rows else None,
        count,
    )


async def matching(
    audits: AuditReads, where: AuditFilter, now: datetime, limit: int, *, page: int = 500
) -> tuple[list[AuditRow], bool]:
    """Every audit ``where`` selects, newest first, at most ``limit`` (a bulk action's
    selection), and whether more matched."""
    rows: list[AuditRow] = []
    after: tuple[Any, ...] | None = None
    while len(rows) <= limit:
        batch = await audits.list_audits(**where.store_filters(now), limit=page, after=after)
        rows.extend(batch)
        last = batch[-1].state.started_at if batch else None
        if len(batch) < page or last is None:
            break
        after = (last, batch[-1].audit_id)
    return rows[:limit], len(rows) > limit


@dataclass(frozen=True)
class Cursor:
    key: tuple[Any, ...]  # the keyset of the row it starts after (or before)
    backwards: bool  # a previous page's
    now: datetime | None  # when its listing's first page was read


def encode_cursor(
    key: tuple[Any, ...],
    sort: str = "started",
    order: str = "desc",
    now: datetime | None = None,
    backwards: bool = False,
) -> str:
    values = [
        v.isoformat()
        if isinstance(v, datetime)
        else (v.days * 86_400 + v.seconds) * 1_000_000 + v.microseconds
        if isinstance(v, timedelta)
        else v
        for v in key
    ]
    raw = {
        "s": sort,
        "o": order,
        "b": backwards,
        "n": now.isoformat() if now is not None else None,
        "k": values,
    }
    return base64.urlsafe_b64encode(json.dumps(raw).encode()).decode().rstrip("=")


def decode_cursor(
    cursor: str, name: str = "cursor", sort: str = "started", order: str = "desc"
) -> Cursor:
    problem = InvalidInput(
        "invalid cursor", [f"{name}: not a cursor a previous page of these audits returned"]
    )
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        raw = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
        if isinstance(raw, list):  # a cursor of before the sorts: newest first
            raw = {"s": "started", "o": "desc", "b": False, "n": None, "k": raw}
        if not isinstance(raw, dict) or not isinstance(raw.get("k"), list):
            raise ValueError("cursor shape")
        if (raw.get("s"), raw.get("o")) != (sort, order):
            other = f"{str(raw.get('s'))[:20]} {str(raw.get('o'))[:20]}"
            raise InvalidInput(
                "invalid cursor",
                [f"{name}: from a list sorted by {other}, not by {sort} {order}"],
            )
        key = _key(sort, raw["k"])
        now = _time(raw["n"]) if raw.get("n") is not None else None
        backwards = raw.get("b")
        if not isinstance(backwards, bool):
            raise ValueError("direction")
    except (ValueError, TypeError, KeyError, binascii.Error, UnicodeError, RecursionError):
        raise problem from None
    return Cursor(key, backwards, now)


def _key(sort: str, values: list[Any]) -> tuple[Any, ...]:
    """A cursor's keyset, typed as :func:`projections.audits.sort_key` makes it for ``sort``."""
    kinds = {"started": "t", "ended": "t", "status": "st", "age": "d"}[sort] + "s"
    if len(values) != len(kinds):
        raise ValueError("keyset length")
    key: list[Any] = []
    for kind, value in zip(kinds, values, strict=True):
        if kind == "t":
            key.append(_time(value))
        elif kind == "d":
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError("age")
            key.append(timedelta(microseconds=value))
        elif isinstance(value, str):
            key.append(value)
        else:
            raise ValueError("text")
    return tuple(key)


def _time(value: Any) -> datetime:
    if not isinstance(value, str):
        raise ValueError("time")
    at = datetime.fromisoformat(value)
    if at.tzinfo is None:
        raise ValueError("naive time")
    return at
