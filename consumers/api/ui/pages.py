"""The console's read pages: the overview, the audits (filters and keyset pages), one audit
(its row, its timeline with the rule behind every step, its state diagram), the outcome
feed's parked deliveries (by endpoint, in keyset pages; retried by
:mod:`~consumers.api.ui.actions`), and the orphans (by workflow, in keyset pages; terminated
by :mod:`~consumers.api.ui.actions`)."""

# No `from __future__ import annotations`: FastAPI evaluates the endpoints' annotations.

import re
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse

from consumers.api.ui.access import Session
from consumers.api.ui.auditview import (
    Group,
    failure_summary,
    fields,
    hold_summary,
    stall_summary,
    timeline,
)
from consumers.api.ui.charts import failure_chart
from consumers.api.ui.diagram import state_svg, transition_rows
from consumers.api.ui.render import page, when
from consumers.api.ui.session import viewer
from consumers.operations.action_events import can_fail, can_restore
from consumers.operations.listing import (
    AUDIT_STATUSES,
    ORDERS,
    SORTS,
    AuditFilter,
    Page,
    list_page,
    parse_filter,
)
from consumers.operations.overview import WINDOWS, gather_overview
from consumers.operations.service import Operations
from projections.audits import ended_at
from projections.row import AuditRow
from statemachine.errors import InvalidInput, NotFound
from statemachine.events import AuditEvent
from statemachine.explain import Step
from statemachine.vocabulary import AUDIT_ID_PATTERN, ERROR_CODES

__all__ = [
    "DELIVERIES_PAGE",
    "ORPHANS_PAGE",
    "PAGE_SIZE",
    "add_orphans_page",
    "add_read_pages",
    "audit_filter",
]

PAGE_SIZE = 50
DELIVERIES_PAGE = 50  # parked entries a page of /ui/deliveries shows
ORPHANS_PAGE = 50  # orphans a page of /ui/orphans shows
AUDIT_ID = re.compile(AUDIT_ID_PATTERN)
HELD = {"": None, "true": True, "false": False}  # the held and stalled filters' choices
WORKFLOWS_OFFERED = 100  # workflows the filter offers besides the watched ones
BULK_FIELDS = ("project", "status", "code", "running_longer_than", "shadow")
Viewer = Annotated[Session, Depends(viewer)]


def add_read_pages(router: APIRouter, ops: Operations) -> None:
    backends = ops.backends

    @router.get("/ui", response_class=HTMLResponse, include_in_schema=False)
    async def overview(request: Request, session: Viewer) -> HTMLResponse:
        view = await gather_overview(ops)
        charts = {
            label: failure_chart(
                view.hourly[label],
                view.now - span,
                view.now,
                f"Failures per hour by error code, last {label}",
                key=label.replace(" ", ""),
            )
            for label, span in WINDOWS
        }
        return page(
            request,
            "overview.html",
            view=view,
            windows=[w for w, _ in WINDOWS],
            charts=charts,
            statuses=AUDIT_STATUSES,
        )

    @router.get("/ui/audits", response_class=HTMLResponse, include_in_schema=False)
    async def audits(
        request: Request,
        session: Viewer,
        q: str = "",
        project: str = "",
        status: str = "",
        code: str = "",
        running_longer_than: str = "",
        shadow: str = "",
        held: str = "",
        workflow: str = "",
        stalled: str = "",
        sort: str = "started",
        order: str = "desc",
        cursor: str = "",
    ) -> HTMLResponse:
        problems: list[str] = []
        where = audit_filter(
            project,
            status,
            code,
            running_longer_than,
            shadow,
            problems,
            held=held,
            q=q,
            workflow=workflow,
            stalled=stalled,
            default_workflow=backends.settings.cloudflare_workflow,
        )
        if sort not in SORTS:
            problems.append(f"sort: one of {', '.join(SORTS)}")
        if order not in ORDERS:
            problems.append("order: asc or desc")
        found: Page | None = None
        if not problems:
            try:
                found = await list_page(
                    backends.store.audits,
                    where,
                    PAGE_SIZE,
                    cursor or None,
                    backends.now(),
                    sort=sort,
                    order=order,
                    total=True,
                )
            except InvalidInput as exc:
                problems.extend(exc.problems)
        query = {
            "q": q,
            "project": project,
            "status": status,
            "code": code,
            "running_longer_than": running_longer_than,
            "shadow": shadow,
            "held": held,
            "workflow": workflow,
            "stalled": stalled,
        }
        now = backends.now()
        watched = backends.settings.watched_workflows()
        present = await backends.store.audits.workflows(WORKFLOWS_OFFERED)
        workflows = [*watched, *sorted(w for w in present if w not in watched)]
        return page(
            request,
            "audits.html",
            status_code=422 if problems else 200,
            rows=[_listed(r, now) for r in found.rows] if found else [],
            total=found.total if found else None,
            next_cursor=found.next_cursor if found else None,
            prev_cursor=found.prev_cursor if found else None,
            query=query,
            # A bulk action selects by the filters alone: with a search, the held, workflow
            # or stalled filter it would act on more than the page lists.
            bulk_query={k: query[k] for k in BULK_FIELDS},
            bulk=not (q.strip() or held or workflow or stalled),
            sort=sort if sort in SORTS else "started",
            order=order if order in ORDERS else "desc",
            sorts=SORTS,
            problems=problems,
            statuses=AUDIT_STATUSES,
            codes=ERROR_CODES,
            workflows=workflows,
            default_workflow=backends.settings.cloudflare_workflow,
        )

    @router.get("/ui/audits/{audit_id}", response_class=HTMLResponse, include_in_schema=False)
    async def audit(
        request: Request, session: Viewer, audit_id: str, done: str = "", message: str = ""
    ) -> HTMLResponse:
        if not AUDIT_ID.match(audit_id):
            return page(request, "error.html", status_code=422, why="not an audit id")
        await ops.await_own_writes(audit_id)  # after an action of this process: once projected
        try:  # the history first: the row, read after it, is never older than the timeline
            steps = await ops.replay(audit_id)
        except NotFound:
            steps = []
        try:  # no probe
            row: AuditRow | None = (await ops.status(audit_id, probe=False)).row
        except NotFound:
            row = None
        if row is None and not steps:
            return page(request, "error.html", status_code=404, why=f"unknown audit {audit_id!r}")
        current = row.status if row is not None else None
        default = backends.settings.cloudflare_workflow
        return page(
            request,
            "audit.html",
            audit_id=audit_id,
            row=row,
            fields=fields(row, default) if row is not None else [],
            failure=failure_summary(row, steps) if row is not None else None,
            hold=hold_summary(row, steps) if row is not None else None,
            stall=stall_summary(row, steps) if row is not None else None,
            default_workflow=default,
            now=backends.now(),
            started_at=row.state.started_at if row is not None else None,
            timeline=[
                {"group": entry}
                if isinstance(entry, Group)
                else {"number": entry[0], **_step(entry[1])}
                for entry in timeline(steps)
            ],
            steps_total=len(steps),
            diagram=state_svg(current),
            transitions=transition_rows(current),
            current=current,
            failable=row is not None and can_fail(row),
            restorable=row is not None and can_restore(row),
            codes=ERROR_CODES,
            done=done[:20],
            message=message[:300],
        )

    @router.get("/ui/deliveries", response_class=HTMLResponse, include_in_schema=False)
    async def deliveries(
        request: Request,
        session: Viewer,
        endpoint: str = "",
        after: str = "",
        done: str = "",
        message: str = "",
    ) -> HTMLResponse:
        problems: list[str] = []
        start = 0
        if after:
            start = int(after) if after.isascii() and after.isdigit() and len(after) <= 18 else -1
            if start < 0:
                problems.append(f"after: a parked entry's number, 0 or more, not {after[:40]!r}")
        listed: dict[str, Any] | None = None
        if not problems:
            try:
                listed = await ops.deliveries(endpoint or None, DELIVERIES_PAGE, start)
            except InvalidInput as exc:
                problems.extend(exc.problems)
        if listed is None:  # the endpoints all the same, for the filter
            listed = {**await ops.deliveries(None, 1, 0), "parked": [], "next_after": None}
        return page(
            request,
            "deliveries.html",
            status_code=422 if problems else 200,
            listed=listed,
            endpoint=endpoint,
            problems=problems,
            done=done[:20],
            message=message[:300],
        )


def add_orphans_page(router: APIRouter, ops: Operations) -> None:
    @router.get("/ui/orphans", response_class=HTMLResponse, include_in_schema=False)
    async def orphans(
        request: Request,
        session: Viewer,
        workflow: str = "",
        after: str = "",
        done: str = "",
        message: str = "",
    ) -> HTMLResponse:
        problems: list[str] = []
        start = 0
        if after:
            start = int(after) if after.isascii() and after.isdigit() and len(after) <= 18 else -1
            if start < 0:
                problems.append(f"after: an orphan's number, 0 or more, not {after[:40]!r}")
        listed: dict[str, Any] | None = None
        if not problems:
            try:
                listed = await ops.orphans(workflow or None, "open", ORPHANS_PAGE, start)
            except InvalidInput as exc:
                problems.extend(exc.problems)
        if listed is None:  # the workflows all the same, for the filter
            listed = {**await ops.orphans(None, "open", 1, 0), "orphans": [], "next_after": None}
        return page(
            request,
            "orphans.html",
            status_code=422 if problems else 200,
            listed=listed,
            workflow=workflow,
            problems=problems,
            done=done[:20],
            message=message[:300],
        )


def audit_filter(
    project: str,
    status: str,
    code: str,
    longer: str,
    shadow: str,
    problems: list[str],
    *,
    held: str = "",
    q: str = "",
    workflow: str = "",
    stalled: str = "",
    default_workflow: str | None = None,
) -> AuditFilter:
    """The listing's filter from the form; each bad field is named in ``problems``."""
    if status and status not in AUDIT_STATUSES:
        problems.append(f"status: one of {', '.join(AUDIT_STATUSES)}")
    if code and code not in ERROR_CODES:
        problems.append(f"error code: unknown code {code!r}")
    if held not in HELD:
        problems.append("held: true or false")
    if stalled not in HELD:
        problems.append("stalled: true or false")
    return parse_filter(
        problems,
        status=status or None,
        project=project or None,
        code=code or None,
        running_longer_than=longer or None,
        shadow=shadow == "on",
        held=HELD.get(held),
        q=q,
        workflow=workflow or None,
        stalled=HELD.get(stalled),
        default_workflow=default_workflow,
        names={"running_longer_than": "running longer than", "q": "search"},
    )


def _listed(row: AuditRow, now: datetime) -> dict[str, Any]:
    """A row of the list: its state, when it ended, and its age (start to end, or to now)."""
    state = row.state
    end = ended_at(row)
    return {
        "state": state,
        "ended_at": end,
        "age": (end or now) - state.started_at if state.started_at is not None else None,
    }


def _actor(event: AuditEvent) -> str:
    """Who acted: an operator's name, who failed it and how it was found, a probe's trigger,
    else the producer."""
    data = event.data
    parts: list[str] = []
    for field in ("actor", "on_behalf_of", "failed_by", "reconciled_by", "trigger"):
        value = getattr(data, field, None)
        if value is not None:
            parts.append(f"{field}={getattr(value, 'value', value)}")
    return ", ".join(parts) or event.producer


def _step(step: Step) -> dict[str, Any]:
    event = step.event
    data = event.data
    detail = {
        k: _shown(k, v)
        for k, v in data.model_dump(mode="json").items()
        if v is not None and k != "policy"
    }
    policy = getattr(data, "policy", None)
    if policy:
        policy = {k: _shown(k, v) for k, v in policy.items()}
    return {
        **step.as_dict(),
        "at": event.occurred_at,
        "held": step.held,
        "changed": step.before != step.after,
        "actor": _actor(event),
        "detail": detail,
        "policy": policy,
    }


def _shown(key: str, value: Any) -> Any:
    """A value of an event's data as the page shows it: its timestamps in the console's one
    format (:func:`~consumers.api.ui.render.when`), a mapping as one line."""
    if isinstance(value, dict):  # a held decision, its policy: one line of `key: value`
        return "; ".join(f"{k}: {_shown(k, v)}" for k, v in value.items() if v is not None)
    return when(value) if key.endswith("_at") and isinstance(value, str) else value
