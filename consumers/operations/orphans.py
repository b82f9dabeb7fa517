"""Orphans as operators see them (``auditrec orphans``, ``/orphans``, the console): the watched
workflows, the orphans found by the scan (:mod:`consumers.components.orphans`), an orphan's
history, and terminating orphans.

A termination goes to the Workflows API (``PATCH …/instances/{id}/status``, spender
``terminate`` of the shared budget), only for an orphan that is ``open`` and of a workflow of
``AUDITREC_TERMINATE_WORKFLOWS``; just before, the table is asked again whether an audit holds
the instance now (then nothing is sent). Each termination is recorded with the actor who asked
(``cli:<os user>``, ``token:<name>``) and the person acted for, then with the API's answer:
``terminated``, ``already_ended`` (it had ended), ``not_found``, or ``failed: <why>`` (the
orphan stays open, to be asked for again).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import structlog

from consumers.runtime.settings import Settings
from consumers.workflows.answers import ProbeFailure
from consumers.workflows.client import WorkflowsClient
from consumers.workflows.ratelimit import TERMINATE
from projections.orphans import ORPHAN_STATES
from projections.store import ProjectionStore
from projections.values import Orphan
from statemachine.errors import InvalidInput, NotFound, Refused, WrongState

__all__ = [
    "MAX_LIMIT",
    "MAX_SEQ",
    "list_orphans",
    "orphan_history",
    "orphan_key",
    "terminate_orphans",
]

log = structlog.get_logger("auditrec")

MAX_LIMIT = 1000
MAX_SEQ = 2**63 - 1
_EVERY = 1_000_000  # "all of them", for --all
ClientOf = Callable[[], Awaitable[WorkflowsClient]]


def orphan_key(
    text: str, workflow: str | None, default: str, known: Iterable[str] = ()
) -> tuple[str, str]:
    """``WORKFLOW/ID``, or ``ID`` (of ``workflow`` when given, else of ``default``) → (workflow,
    instance id). An instance id may hold ``/`` and spaces: with ``workflow`` given, ``text``
    is the id whole; else what comes before the first ``/`` names the workflow only when it is
    one of ``known`` (the watched workflows)."""
    if not text:
        raise InvalidInput("ID: an orphan's instance id must not be empty")
    if workflow is not None:
        return workflow, text
    name, slash, rest = text.partition("/")
    if slash and rest and name in set(known):
        return name, rest
    return default, text


def _orphan(o: Orphan, terminable: frozenset[str]) -> dict[str, Any]:
    return asdict(o) | {"terminable": o.workflow in terminable}


async def _workflows(store: ProjectionStore, settings: Settings) -> list[dict[str, Any]]:
    watched = await store.orphans.watched()
    counts = await store.orphans.open_counts()
    terminable = settings.terminate_workflow_names()
    configured = settings.watched_workflows()
    names = [*configured, *sorted(set(watched) - set(configured))]
    return [
        {
            "name": name,
            "watched_since": watched.get(name),
            "configured": name in configured,
            "terminable": name in terminable,
            "open": counts.get(name, 0),
        }
        for name in names
    ]


def _known(workflows: list[dict[str, Any]], workflow: str | None) -> None:
    names = [w["name"] for w in workflows]
    if workflow is not None and workflow not in names:
        raise InvalidInput(
            f"workflow: {workflow[:80]!r} is not watched; watched: {', '.join(names) or '(none)'}"
            " (AUDITREC_CLOUDFLARE_WORKFLOW, AUDITREC_CLOUDFLARE_WORKFLOWS)"
        )


async def list_orphans(
    store: ProjectionStore,
    settings: Settings,
    *,
    workflow: str | None = None,
    state: str | None = "open",
    limit: int = 100,
    after: int = 0,
) -> dict[str, Any]:
    """The watched workflows (since when, open orphans, whether terminable) and the orphans in
    ``state`` (``None``: any), oldest found first, ``limit`` a page from ``after`` (a seq)."""
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"limit: must be 1 to {MAX_LIMIT}, not {limit}")
    if not 0 <= after <= MAX_SEQ:
        raise InvalidInput(f"after: must be 0 to {MAX_SEQ}, not {after}")
    if state is not None and state not in ORPHAN_STATES:
        raise InvalidInput(f"state: must be one of {', '.join(ORPHAN_STATES)} or all")
    workflows = await _workflows(store, settings)
    _known(workflows, workflow)
    rows = await store.orphans.page(workflow, state=state, limit=limit + 1, after=after)
    page = rows[:limit]
    terminable = settings.terminate_workflow_names()
    return {
        "workflows": workflows,
        "orphans": [_orphan(o, terminable) for o in page],
        "open": sum(w["open"] for w in workflows if workflow is None or w["name"] == workflow),
        "scan_interval": settings.orphan_interval.total_seconds() or None,
        "next_after": page[-1].seq if len(rows) > limit else None,
    }


async def orphan_history(
    store: ProjectionStore, settings: Settings, workflow: str, instance_id: str
) -> dict[str, Any]:
    """An orphan and its history, oldest first; :class:`NotFound` for an unknown one."""
    orphan = await store.orphans.get(workflow, instance_id)
    if orphan is None:
        raise NotFound(f"no orphan {instance_id[:120]!r} in workflow {workflow[:80]!r}")
    history = await store.orphans.history(workflow, instance_id)
    return {
        "orphan": _orphan(orphan, settings.terminate_workflow_names()),
        "history": [asdict(e) for e in history],
    }


def _refuse_unterminable(settings: Settings, workflows: Sequence[str]) -> None:
    terminable = settings.terminate_workflow_names()
    refused = sorted({w for w in workflows if w not in terminable})
    if refused:
        raise Refused(
            f"workflow {', '.join(repr(w[:80]) for w in refused)} is not one auditrec may "
            "terminate instances of: AUDITREC_TERMINATE_WORKFLOWS names "
            f"{', '.join(sorted(terminable)) or 'none'}"
        )


async def terminate_orphans(
    store: ProjectionStore,
    settings: Settings,
    client_of: ClientOf,
    *,
    targets: Sequence[tuple[str, str]] | None,
    workflow: str | None,
    actor: str,
    on_behalf_of: str | None = None,
    dry_run: bool = False,
    strict: bool = False,
) -> dict[str, Any]:
    """Terminate the orphans ``targets`` ((workflow, instance id) pairs), or with ``None`` every
    open orphan (of ``workflow``; those of workflows not in ``AUDITREC_TERMINATE_WORKFLOWS``
    are reported as skipped). An unknown orphan, or one named (or a ``workflow``) not in
    ``AUDITREC_TERMINATE_WORKFLOWS``, refuses the whole request before anything is sent
    (:class:`NotFound`, :class:`Refused`); one already terminated or gone is reported and sent
    nothing (``strict``: :class:`WrongState` instead, for a single orphan over HTTP)."""
    if targets is not None and not targets:
        raise InvalidInput("ids: name at least one orphan, or ask for all of them")
    if targets is not None:
        _refuse_unterminable(settings, [wf for wf, _ in targets])
    elif workflow is not None:
        _refuse_unterminable(settings, [workflow])
    if targets is None:
        workflows = await _workflows(store, settings)
        _known(workflows, workflow)
        chosen = await store.orphans.page(workflow, state="open", limit=_EVERY)
    else:
        chosen = []
        unknown = []
        for wf, iid in dict.fromkeys(targets):
            orphan = await store.orphans.get(wf, iid)
            if orphan is None:
                unknown.append(f"{wf}/{iid}")
            else:
                chosen.append(orphan)
        if unknown:
            raise NotFound(
                f"not an orphan: {', '.join(repr(u[:120]) for u in unknown[:5])}"
                + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
            )
    terminable = settings.terminate_workflow_names()
    if targets is not None:
        _refuse_unterminable(settings, [o.workflow for o in chosen])
    if strict:
        for o in chosen:
            if o.state != "open":
                raise WrongState(_not_open(o))
    results: list[dict[str, Any]] = []
    client: WorkflowsClient | None = None
    for o in chosen:
        entry = {"workflow": o.workflow, "instance_id": o.instance_id, "created_on": o.created_on}
        if o.state != "open":
            results.append(entry | {"result": "skipped", "detail": _not_open(o)})
            continue
        if o.workflow not in terminable:  # --all: only the workflows auditrec may terminate in
            barred = "its workflow is not in AUDITREC_TERMINATE_WORKFLOWS"
            results.append(entry | {"result": "skipped", "detail": barred})
            continue
        if dry_run:
            results.append(entry | {"result": "would_terminate", "detail": None})
            continue
        if await store.orphans.held([o.instance_id]):
            held = "an audit holds it now: not an orphan any more"
            results.append(entry | {"result": "skipped", "detail": held})
            continue
        before = await store.orphans.ask_termination(
            o.workflow, o.instance_id, actor, on_behalf_of, datetime.now(UTC)
        )
        if before is None or before.state != "open":
            why = "it is no longer an orphan" if before is None else _not_open(before)
            if strict:
                raise WrongState(why)
            results.append(entry | {"result": "skipped", "detail": why})
            continue
        if client is None:
            client = await client_of()
        answer = await client.terminate(o.instance_id, workflow=o.workflow, spender=TERMINATE)
        detail: str | None
        result: str
        if isinstance(answer, ProbeFailure):
            result, detail = "failed", f"{answer.reason.value}: {answer.detail}"[:500]
        else:
            result, detail = answer.outcome, answer.status
        await store.orphans.termination_result(
            o.workflow, o.instance_id, result, detail, datetime.now(UTC)
        )
        log.info(
            "orphan terminated" if result == "terminated" else "orphan termination answered",
            workflow=o.workflow,
            instance_id=o.instance_id[:200],
            result=result,
            actor=actor,
            on_behalf_of=on_behalf_of,
        )
        results.append(entry | {"result": result, "detail": detail})
    return {
        "dry_run": dry_run,
        "results": results,
        "terminated": sum(1 for r in results if r["result"] == "terminated"),
    }


def _not_open(o: Orphan) -> str:
    if o.state == "terminated":
        when = f"{o.terminated_at:%Y-%m-%d %H:%M:%S}Z" if o.terminated_at else "earlier"
        return f"already terminated (asked by {o.terminated_by or 'unknown'}, {when})"
    return f"no longer an orphan: {o.state} since its last scan"
