"""``auditrec orphans``: instances of the watched workflows that no audit holds (the same
operations as ``/orphans``): list them, show one's history, terminate them."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Any

import click

from consumers.cli.braking import cli_actor
from consumers.cli.context import handle_errors, run, settings_of, with_backends
from consumers.cli.output import err, out, print_json
from consumers.operations.orphans import MAX_LIMIT, orphan_key
from projections.orphans import ORPHAN_STATES

__all__ = ["orphans"]

_json = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
_workflow = click.option(
    "--workflow", metavar="W", help="Only this workflow (for IDs: the workflow they are of)."
)


def _ops(ctx: click.Context, work: Callable[[Any], Awaitable[Any]]) -> Any:
    from consumers.operations.service import Operations

    settings = settings_of(ctx)
    return run(
        with_backends(
            settings, lambda backends: work(Operations(backends)), log=False, read_only=True
        )
    )


def _line(o: dict[str, Any]) -> str:
    ended = ""
    if o["terminated_by"] is not None:
        ended = f"  [terminate asked by {o['terminated_by']}"
        ended += f" for {o['on_behalf_of']}" if o["on_behalf_of"] else ""
        ended += f": {o['result'] or 'unanswered'}]"
    return (
        f"{o['workflow']}/{o['instance_id']}  {o['status']}  {o['state']}  "
        f"created {o['created_on']:%Y-%m-%d %H:%M:%S}Z  "
        f"found {o['first_seen']:%Y-%m-%d %H:%M:%S}Z  "
        f"last seen {o['last_seen']:%Y-%m-%d %H:%M:%S}Z{ended}"
    )


@click.group(invoke_without_command=True)
@_workflow
@click.option(
    "--state",
    type=click.Choice([*ORPHAN_STATES, "all"]),
    default="open",
    show_default=True,
    help="Orphans in this state.",
)
@click.option("--limit", type=click.IntRange(1, MAX_LIMIT), default=100, show_default=True)
@_json
@click.pass_context
@handle_errors
def orphans(
    ctx: click.Context, workflow: str | None, state: str, limit: int, as_json: bool
) -> None:
    """Instances listed alive in a watched workflow that no audit holds, older than
    AUDITREC_INSTANCE_LOST_GRACE and created after auditrec began watching the workflow: they
    cost money and nothing will finish them. Scanned once per AUDITREC_ORPHAN_INTERVAL by the
    watchdog. Lists the watched workflows, then one line per orphan (WORKFLOW/ID)."""
    if ctx.invoked_subcommand is not None:
        return
    data = _ops(ctx, lambda ops: ops.orphans(workflow, None if state == "all" else state, limit))
    if as_json:
        print_json(data)
        return
    if data["scan_interval"] is None:
        out.print("orphan scan off: AUDITREC_ORPHAN_INTERVAL is 0", markup=False)
    for w in data["workflows"]:
        since = w["watched_since"]
        where = f"watched since {since:%Y-%m-%d %H:%M:%S}Z" if since else "not registered yet"
        terminable = "" if w["terminable"] else "  (not terminable: AUDITREC_TERMINATE_WORKFLOWS)"
        out.print(f"{w['name']}  {where}  open {w['open']}{terminable}", markup=False)
    if not data["orphans"]:
        out.print("no orphans" if state == "open" else f"no orphans {state}", markup=False)
        return
    for o in data["orphans"]:
        out.print(_line(o), markup=False)
    if data["next_after"] is not None:
        out.print("… more (--limit)", markup=False)


@orphans.command()
@click.argument("orphan_id", metavar="WORKFLOW/ID")
@_workflow
@_json
@click.pass_context
@handle_errors
def show(ctx: click.Context, orphan_id: str, workflow: str | None, as_json: bool) -> None:
    """An orphan and its history: found, seen with another status, gone or adopted by an
    audit, each termination asked (by whom, for whom) and its answer. WORKFLOW/ID, or ID with
    --workflow (an id of the default workflow needs neither)."""
    settings = settings_of(ctx)
    wf, iid = orphan_key(
        orphan_id, workflow, settings.cloudflare_workflow, settings.watched_workflows()
    )
    data = _ops(ctx, lambda ops: ops.orphan(wf, iid))
    if as_json:
        print_json(data)
        return
    out.print(_line(data["orphan"]), markup=False)
    for e in data["history"]:
        who = f" by {e['actor']}" if e["actor"] else ""
        who += f" for {e['on_behalf_of']}" if e["on_behalf_of"] else ""
        detail = f": {e['detail']}" if e["detail"] else ""
        out.print(f"  {e['at']:%Y-%m-%d %H:%M:%S}Z  {e['kind']}{who}{detail}", markup=False)


@orphans.command()
@click.argument("ids", nargs=-1, metavar="[WORKFLOW/ID]...")
@click.option("--all", "every", is_flag=True, help="Every open orphan (of --workflow).")
@_workflow
@click.option("--dry-run", is_flag=True, help="List what it would terminate; do nothing.")
@click.option("--yes", is_flag=True, help="Do it (without --yes: a dry run, exit 2).")
@click.option(
    "--operator",
    metavar="NAME",
    help="The person you act for, recorded as on_behalf_of beside the actor (cli:<os user>).",
)
@_json
@click.pass_context
@handle_errors
def terminate(
    ctx: click.Context,
    ids: tuple[str, ...],
    every: bool,
    workflow: str | None,
    dry_run: bool,
    yes: bool,
    operator: str | None,
    as_json: bool,
) -> None:
    """Terminate orphans through the Workflows API: the IDs named (WORKFLOW/ID, or ID with
    --workflow), or --all (listed first). Only instances of AUDITREC_TERMINATE_WORKFLOWS; an
    orphan terminated already is reported and sent nothing. Recorded with the actor
    (cli:<os user>) and --operator; `auditrec orphans show` replays it."""
    if bool(ids) == every:
        err.print("error: name the orphans to terminate (IDS), or --all (not both)", markup=False)
        sys.exit(2)
    settings = settings_of(ctx)
    targets = None
    if not every:
        known = settings.watched_workflows()
        default = settings.cloudflare_workflow
        targets = [orphan_key(i, workflow, default, known) for i in ids]
    preview = dry_run or not yes

    def work(chosen: list[tuple[str, str]] | None, dry: bool) -> Callable[[Any], Awaitable[Any]]:
        return lambda ops: ops.terminate_orphans(
            chosen, workflow, cli_actor(), operator, dry_run=dry
        )

    if every and not preview:
        # --all: the list first, and then those listed (not whatever a scan found since)
        listed = _ops(ctx, work(None, True))
        if not as_json:
            _show(listed, False, listing=True)
        targets = [
            (r["workflow"], r["instance_id"])
            for r in listed["results"]
            if r["result"] == "would_terminate"
        ]
        if not targets:
            return
    data = _ops(ctx, work(targets, preview))
    _show(data, as_json)
    if not dry_run and not yes:
        err.print("error: nothing done: `auditrec orphans terminate` needs --yes", markup=False)
        sys.exit(2)
    if any(r["result"] == "failed" for r in data["results"]):
        sys.exit(1)


def _show(data: dict[str, Any], as_json: bool, *, listing: bool = False) -> None:
    if as_json:
        print_json(data)
        return
    results = data["results"]
    if data["dry_run"]:
        verb = "terminating" if listing else "would terminate"
        count = sum(1 for r in results if r["result"] == "would_terminate")
        out.print(f"{verb} {count} orphan(s):", markup=False)
    else:
        out.print(f"terminated {data['terminated']} of {len(results)} orphan(s):", markup=False)
    for r in results:
        detail = f": {r['detail']}" if r["detail"] else ""
        out.print(f"  {r['workflow']}/{r['instance_id']}  {r['result']}{detail}", markup=False)
