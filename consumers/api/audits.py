"""The audit routes: one audit's status with on-demand reconciliation, the listing (keyset
pages), and an audit's history with the decision behind every step."""

# No `from __future__ import annotations`: FastAPI evaluates the endpoints' annotations.

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from consumers.api.models import (
    R404,
    R422,
    R503,
    AuditHistory,
    AuditPage,
    AuditStatus,
)
from consumers.operations.listing import (
    MAX_QUERY,
    WORKFLOW_PATTERN,
    Order,
    SortName,
    StatusName,
    list_page,
    parse_filter,
)
from consumers.operations.service import Operations
from projections.row import row_dict
from statemachine.errors import InvalidInput, NotFound
from statemachine.explain import explain
from statemachine.vocabulary import AUDIT_ID_PATTERN, AUDIT_ID_RULE, ErrorCode

__all__ = ["add_audit_routes"]

AuditIdPath = Annotated[
    str,
    Path(
        pattern=AUDIT_ID_PATTERN,
        description=f"The audit id: {AUDIT_ID_RULE.removeprefix('must be ')}.",
        examples=["a-123"],
    ),
]


def add_audit_routes(private: APIRouter, ops: Operations) -> None:
    backends = ops.backends

    @private.get(
        "/audits/{audit_id}",
        response_model=AuditStatus,
        tags=["audits"],
        summary="The reconciled audit (probes a running audit on demand)",
        responses={**R404, **R422, **R503},
    )
    async def get_audit(
        audit_id: AuditIdPath,
        probe: Annotated[
            bool,
            Query(
                description="Probe a running audit whose last observation is older than "
                "AUDITREC_ON_DEMAND_MIN_INTERVAL, and wait (up to AUDITREC_ON_DEMAND_WAIT) "
                "for the outcome. `false`: answer from the projection only."
            ),
        ] = True,
    ) -> dict[str, Any]:
        result = await ops.status(audit_id, probe=probe, inline=False)
        body = row_dict(result.row)
        body["probed"] = result.probed
        body["reconciliation"] = result.outcome.as_dict() if result.outcome is not None else None
        body["note"] = result.note
        return body

    @private.get(
        "/audits",
        response_model=AuditPage,
        tags=["audits"],
        summary="Audits, newest first or sorted, filtered or searched (keyset pages, a total)",
        responses={**R422, **R503},
    )
    async def list_audits(
        status: StatusName | None = None,
        project: Annotated[
            str | None,
            Query(
                max_length=256, description="Only this project (the console's and the CLI's name)."
            ),
        ] = None,
        code: Annotated[
            ErrorCode | None,
            Query(
                description="Only failures with this error code (the console's and the CLI's name)."
            ),
        ] = None,
        project_id: Annotated[
            str | None,
            Query(max_length=256, description="The older name of `project`.", deprecated=True),
        ] = None,
        error_code: Annotated[
            ErrorCode | None,
            Query(description="The older name of `code`.", deprecated=True),
        ] = None,
        running_longer_than: Annotated[
            str | None,
            Query(
                max_length=32,
                description="Running audits started longer ago than this (`2h`, `90m`); "
                "implies `status` running.",
            ),
        ] = None,
        older_than: Annotated[
            str | None,
            Query(
                max_length=32,
                description="Started longer ago than this, in any status: the older name "
                "of `running_longer_than` (which implies running), kept as it was.",
                deprecated=True,
            ),
        ] = None,
        held: Annotated[
            bool | None,
            Query(
                description="`true`: only audits whose reconciler decision the mass-failure "
                "brake holds; `false`: only the others."
            ),
        ] = None,
        workflow: Annotated[
            str | None,
            Query(
                pattern=WORKFLOW_PATTERN,
                description="Only audits of this Cloudflare workflow; for "
                "`AUDITREC_CLOUDFLARE_WORKFLOW` (the default), audits that name none too.",
                examples=["site-audit"],
            ),
        ] = None,
        stalled: Annotated[
            bool | None,
            Query(
                description="`true`: only running audits with a stall verdict recorded (no "
                "progress for `AUDITREC_STALLED_AFTER` while their instance runs); `false`: "
                "only the others."
            ),
        ] = None,
        q: Annotated[
            str | None,
            Query(
                max_length=MAX_QUERY,
                description="Search: an audit id, a workflow instance id or a project id "
                "(exactly), or the beginning of a start URL (with or without its scheme).",
            ),
        ] = None,
        sort: Annotated[
            SortName,
            Query(
                description="`started` (the start), `ended` (completed or failed; unfinished "
                "audits last), `status` (then the start), `age` (start to end, or to now)."
            ),
        ] = "started",
        order: Order = "desc",
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        cursor: Annotated[
            str | None,
            Query(
                max_length=1024,
                description="`next_cursor` or `prev_cursor` of a page of the same list.",
            ),
        ] = None,
    ) -> dict[str, Any]:
        problems: list[str] = []
        for name, value, older, old_value in (
            ("project", project, "project_id", project_id),
            ("code", code, "error_code", error_code),
        ):
            if value is not None and old_value is not None and value != old_value:
                problems.append(f"query.{older}: the older name of {name}, given another value")
        where = parse_filter(
            problems,
            status=status,
            project=project if project is not None else project_id,
            code=code if code is not None else error_code,
            running_longer_than=running_longer_than,
            older_than=older_than,
            held=held,
            q=q,
            workflow=workflow,
            stalled=stalled,
            default_workflow=backends.settings.cloudflare_workflow,
            names={
                "running_longer_than": "query.running_longer_than",
                "older_than": "query.older_than",
                "q": "query.q",
                "workflow": "query.workflow",
            },
        )
        if problems:
            raise InvalidInput("invalid filter", problems)
        page = await list_page(
            backends.store.audits,
            where,
            limit,
            cursor,
            backends.now(),
            cursor_name="query.cursor",
            sort=sort,
            order=order,
            total=True,
        )
        return {
            "audits": [row_dict(r) for r in page.rows],
            "next_cursor": page.next_cursor,
            "prev_cursor": page.prev_cursor,
            "total": page.total,
        }

    @private.get(
        "/audits/{audit_id}/events",
        response_model=AuditHistory,
        tags=["audits"],
        summary="The audit's history: each event, state before → after, the rule that fired",
        responses={**R404, **R422, **R503},
    )
    async def audit_events(audit_id: AuditIdPath) -> dict[str, Any]:
        # Read-your-writes, as for the status: a history read right after a publish has it.
        await ops.await_own_writes(audit_id)
        history = await backends.store.audits.history(audit_id)
        if not history:
            raise NotFound(f"unknown audit {audit_id!r}")
        steps = explain([h.event for h in history], backends.policy)
        row = await backends.store.audits.get(audit_id)
        events = []
        for entry, step in zip(history, steps, strict=True):
            item: dict[str, Any] = dict(step.as_dict())
            item["causation_id"] = (
                str(entry.event.causation_id) if entry.event.causation_id else None
            )
            item["data"] = entry.event.data.model_dump(mode="json")
            if entry.position is not None:
                topic, partition, offset = entry.position
                item["position"] = {"topic": topic, "partition": partition, "offset": offset}
            events.append(item)
        return {"audit_id": audit_id, "status": row.status if row else None, "events": events}
