"""Commands about audits: ``publish``, ``status``, ``audits``, ``sweep``, ``replay``."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from consumers.cli.context import check_audit_id, handle_errors, run, settings_of, with_backends
from consumers.cli.output import audits_table, err, out, print_json, replay_table
from consumers.operations.listing import AUDIT_STATUSES, ORDERS, SORTS
from consumers.workflows.answers import PROBABLE_CAUSE
from projections.row import row_dict
from statemachine.errors import InvalidInput
from statemachine.events import ProbeFailureReason
from statemachine.vocabulary import ERROR_CODES

__all__ = ["audits", "publish", "replay", "status", "sweep"]


@click.command()
@click.argument("file", type=click.File("r", encoding="utf-8"))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@handle_errors
def publish(ctx: click.Context, file: Any, as_json: bool) -> None:
    """Publish JSON Lines envelopes from FILE (or - for stdin). All lines are validated first.

    On any invalid line it prints "line N: reason" for each, publishes nothing and exits 2.
    A line's data.actor, if any, must be you (cli:<os user>)."""
    from consumers.cli.assembly import operations
    from consumers.cli.braking import cli_actor
    from consumers.operations.publishing import parse_json_lines

    try:
        lines = file.readlines()
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{file.name}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    events = parse_json_lines(lines, actor=cli_actor())
    settings = settings_of(ctx)
    ids = run(
        with_backends(settings, lambda backends: operations(backends).publish(events), store=False)
    )
    if as_json:
        print_json({"published": len(ids), "event_ids": ids})
    else:
        out.print(f"published {len(ids)} event(s)")


@click.command()
@click.argument("audit_id")
@click.option("--no-probe", is_flag=True, help="Read the projection only; do not probe.")
@click.option("--inline", is_flag=True, help="Without a running serve, reconcile in this process.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@handle_errors
def status(ctx: click.Context, audit_id: str, no_probe: bool, inline: bool, as_json: bool) -> None:
    """Reconcile one audit on demand, then show it.

    The reconciling is done by the running auditrec serve; without one, status says so
    (or, with --inline, reconciles in this process). With --json it prints exactly the row's
    columns; how it was reconciled goes to stderr."""
    from consumers.cli.assembly import operations

    check_audit_id(audit_id)
    settings = settings_of(ctx)
    result = run(
        with_backends(
            settings,
            lambda backends: operations(backends).status(
                audit_id, probe=not no_probe, inline=inline
            ),
            log=not no_probe,
            read_only=no_probe,
        )
    )
    if result.note:
        err.print(f"note: {result.note}", markup=False)
    if as_json:  # exactly the row (DESIGN §6 columns); how it was reconciled goes to stderr
        if result.outcome is not None:
            err.print(f"reconciliation: {json.dumps(result.outcome.as_dict())}", markup=False)
        print_json(row_dict(result.row))
        return
    for key, value in row_dict(result.row).items():
        if key == "workflow" and value is None:  # names none: the default workflow's
            value = f"{settings.cloudflare_workflow} (default)"
        if value is not None:
            out.print(f"{key:>22}  {value}", markup=False)
    if result.outcome is not None and result.outcome.reason:
        out.print(f"{'reconciliation':>22}  {result.outcome.reason}", markup=False)


@click.command()
@click.option("--status", "status_", type=click.Choice(AUDIT_STATUSES))
@click.option("--project", help="Only this project id.")
@click.option("--code", type=click.Choice(ERROR_CODES), help="Only failures with this code.")
@click.option(
    "--running-longer-than",
    help="Only running audits started longer ago than this (2h, 90m, 1d).",
)
@click.option("--older-than", hidden=True, help="Started longer ago than this, any status.")
@click.option(
    "--held/--not-held",
    default=None,
    help="Only audits whose decision the mass-failure brake holds (or only the others).",
)
@click.option(
    "--workflow",
    help="Only audits of this workflow (for AUDITREC_CLOUDFLARE_WORKFLOW, those naming none too).",
)
@click.option(
    "--stalled/--not-stalled",
    default=None,
    help="Only running audits with a stall verdict recorded (or only the others).",
)
@click.option(
    "-q",
    "--q",
    "q",
    help="Search: an audit id, an instance id, a project id, or a start URL's beginning.",
)
@click.option("--sort", type=click.Choice(SORTS), default="started", show_default=True)
@click.option("--order", type=click.Choice(ORDERS), default="desc", show_default=True)
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True)
@click.option("--cursor", help="Where to go on from (it prints the next and previous cursors).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@handle_errors
def audits(
    ctx: click.Context,
    status_: str | None,
    project: str | None,
    code: str | None,
    running_longer_than: str | None,
    older_than: str | None,
    held: bool | None,
    workflow: str | None,
    stalled: bool | None,
    q: str | None,
    sort: str,
    order: str,
    limit: int,
    cursor: str | None,
    as_json: bool,
) -> None:
    """List audits from the projection, newest first (or by --sort), a page at a time.

    Reads the database only, so it works while the event log is down. It prints how many
    audits match, and "more: --cursor X" (and "previous: --cursor Y") on stderr."""
    from consumers.operations.listing import list_page, parse_filter

    settings = settings_of(ctx)
    problems: list[str] = []
    where = parse_filter(
        problems,
        status=status_,
        project=project,
        code=code,
        running_longer_than=running_longer_than,
        older_than=older_than,
        held=held,
        q=q,
        workflow=workflow,
        stalled=stalled,
        default_workflow=settings.cloudflare_workflow,
        names={
            "running_longer_than": "--running-longer-than",
            "older_than": "--older-than",
            "q": "--q",
            "workflow": "--workflow",
        },
    )
    if problems:
        raise InvalidInput("; ".join(problems))
    page = run(
        with_backends(
            settings,
            lambda backends: list_page(
                backends.store.audits,
                where,
                limit,
                cursor,
                backends.now(),
                cursor_name="--cursor",
                sort=sort,
                order=order,
                total=True,
            ),
            log=False,
            read_only=True,
        )
    )
    if as_json:
        print_json([row_dict(r) for r in page.rows])
    else:
        out.print(audits_table(page.rows))
    # On stderr: the JSON on stdout stays one document.
    err.print(f"{page.total} audit{'' if page.total == 1 else 's'}", markup=False)
    if page.next_cursor is not None:
        err.print(f"more: --cursor {page.next_cursor}", markup=False)
    if page.prev_cursor is not None:
        err.print(f"previous: --cursor {page.prev_cursor}", markup=False)


@click.command()
@click.option("--dry-run", is_flag=True, help="Only list the candidates.")
@click.option(
    "--inline", is_flag=True, help="Without a running serve, run the pipeline in this process."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@handle_errors
def sweep(ctx: click.Context, dry_run: bool, inline: bool, as_json: bool) -> None:
    """One watchdog tick; waits for the outcomes and prints a summary.

    The summary: candidates, probed, failed per code, held by the brake (and the brake's state
    when engaged), healthy, unchanged, probe errors. It returns once every outcome is known or
    held. Without a running auditrec serve it refuses (exit 1) unless --inline; when the brake
    held decisions of the sweep, or every probe of the tick failed, it says why on stderr and
    exits 1 (not done)."""
    from consumers.cli.assembly import operations

    settings = settings_of(ctx)
    shown: list[int] = []

    def progress(done: int, total: int) -> None:
        """While it waits: `outcomes 40/100` (redrawn on a terminal, else a line a change)."""
        if shown and shown[-1] == done:
            return
        shown.append(done)
        end = "\r" if err.is_terminal else "\n"
        err.print(f"waiting for outcomes: {done}/{total}", end=end, markup=False)

    summary = run(
        with_backends(
            settings,
            lambda backends: operations(backends).sweep(
                dry_run=dry_run, inline=inline, progress=progress
            ),
        )
    )
    data = summary.as_dict()
    blind = _every_probe_failed(data)
    held = _held_by_the_brake(data)
    if as_json:
        print_json(data)
        for why in (blind, held):
            if why:
                err.print(f"error: {why}", markup=False)
        if blind or held:
            sys.exit(1)
        return
    if data["skipped"]:
        out.print("skipped: another watchdog tick holds the lock")
        return
    out.print(f"sweep {data['sweep_id']}: {data['candidates']} candidate(s)")
    if dry_run:
        for c in data["candidate_audits"]:
            seen = c["last_observed_status"] or "never observed"
            out.print(f"  {c['audit_id']}  started {c['started_at']}  {seen}", markup=False)
        return
    failed = ", ".join(f"{k} {v}" for k, v in sorted(data["failed"].items())) or "none"
    errors = ", ".join(f"{k} {v}" for k, v in sorted(data["probe_errors"].items())) or "none"
    out.print(f"  probed      {data['probed']}")
    out.print(f"  failed      {sum(data['failed'].values())} ({failed})")
    if data["would_fail"]:
        out.print(f"  would fail  {sum(data['would_fail'].values())} (shadow mode)")
    if data["held"]:
        out.print(f"  held        {data['held']} (held by the brake; `auditrec brake`)")
    brake = data["brake"] or {}
    if brake.get("engaged"):
        out.print(
            f"  brake       ENGAGED since {brake['since']}, {brake['held']} decision(s) held",
            markup=False,
        )
    out.print(f"  healthy     {data['healthy']}")
    out.print(f"  unchanged   {data['unchanged']}")
    out.print(f"  probe errors {sum(data['probe_errors'].values())} ({errors})")
    if data["pending"]:
        out.print(f"  pending     {data['pending']} (no outcome in time)")
    out.print(f"  took        {data['elapsed_s']}s")
    for why in (blind, held):
        if why:
            err.print(f"error: {why}", markup=False)
    if blind or held:
        sys.exit(1)


def _held_by_the_brake(data: dict[str, Any]) -> str | None:
    """Why the sweep is not done because the mass-failure brake held its decisions, or
    ``None``."""
    if not data["held"]:
        return None
    brake = data["brake"] or {}
    state = (
        f"the brake is engaged since {brake['since']} and holds {brake['held']} in all"
        if brake.get("engaged")
        else "the brake is not engaged: the holds await the sweep's verdict"
    )
    return (
        f"the mass-failure brake held {data['held']} decision(s) of this sweep ({state}): "
        "review them with `auditrec brake`, then `auditrec brake release` or `discard`"
    )


def _every_probe_failed(data: dict[str, Any]) -> str | None:
    """Why the sweep saw nothing (every probe of it failed), or ``None``."""
    errors: dict[str, int] = data["probe_errors"]
    if not data["probed"] or sum(errors.values()) != data["probed"]:
        return None
    reason = max(errors, key=lambda r: errors[r])
    cause = PROBABLE_CAUSE[ProbeFailureReason(reason)]
    return f"every probe of this sweep failed ({reason} {errors[reason]}): {cause}"


@click.command()
@click.argument("audit_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@handle_errors
def replay(ctx: click.Context, audit_id: str, as_json: bool) -> None:
    """The audit's timeline: each event, state before → after, and the rule that fired.

    A recorded decision is explained with the thresholds it recorded, not today's."""
    from consumers.cli.assembly import operations

    settings = settings_of(ctx)
    check_audit_id(audit_id)
    steps = run(
        with_backends(
            settings,
            lambda backends: operations(backends).replay(audit_id),
            log=False,
            read_only=True,
        )
    )
    if as_json:
        print_json([s.as_dict() for s in steps])
        return
    out.print(replay_table(audit_id, steps))
