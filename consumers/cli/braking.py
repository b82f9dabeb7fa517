"""``auditrec brake``: the mass-failure brake's state, and the operator's way out of it
(``release``: the held failures take effect; ``discard``: the audits keep running)."""

from __future__ import annotations

import getpass
import sys
from typing import Any

import click

from consumers.cli.context import handle_errors, run, settings_of, with_backends
from consumers.cli.output import err, out, print_json

__all__ = ["brake", "cli_actor"]


def cli_actor() -> str:
    """Who acts from the command line: ``cli:<os user>``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"cli:{user}"


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@handle_errors
def brake(ctx: click.Context, as_json: bool) -> None:
    """The mass-failure brake: whether it is engaged and the failures it holds.

    When one watchdog sweep would fail at least AUDITREC_BRAKE_MIN_AUDITS audits and more
    than AUDITREC_BRAKE_MIN_SHARE of its observations with instance_lost, those failures are
    held (the audits keep running) until `auditrec brake release` or `auditrec brake discard`.
    """
    if ctx.invoked_subcommand is not None:
        return
    from consumers.cli.assembly import operations

    data = run(
        with_backends(settings_of(ctx), lambda backends: operations(backends).brake_status())
    )
    if as_json:
        print_json(data)
        return
    if data["engaged"]:
        out.print(
            f"brake ENGAGED since {data['since']} by sweep {data['sweep_id']}: "
            f"{data['lost']} of {data['observations']} observations instance_lost",
            markup=False,
        )
    else:
        out.print("brake not engaged", markup=False)
    last = data["last_ended"]
    if last is not None:
        out.print(f"last {last['how']} by {last['by']} at {last['at']}", markup=False)
    out.print(f"held decisions: {data['held']}", markup=False)
    _list(data["holds"])
    if data["held"] > len(data["holds"]):
        out.print(f"  … and {data['held'] - len(data['holds'])} more", markup=False)


def _list(holds: list[dict[str, Any]]) -> None:
    for h in holds:
        out.print(
            f"  {h['audit_id']}  held {h['held_at']}  instance {h['workflow_instance_id']}",
            markup=False,
        )


def _end(
    ctx: click.Context, how: str, reason: str | None, dry_run: bool, yes: bool, as_json: bool
) -> None:
    from consumers.cli.assembly import operations

    settings = settings_of(ctx)
    preview = dry_run or not yes
    data = run(
        with_backends(
            settings,
            lambda backends: operations(backends).end_brake(
                how, cli_actor(), reason, dry_run=preview
            ),
        )
    )
    verb = "release" if how == "released" else "discard"
    if as_json:
        print_json(data)
    elif preview:
        effect = "fail" if how == "released" else "keep running"
        out.print(
            f"would {verb} {data['holds']} held decision(s) ({effect}) and disengage the brake"
            f"{'' if data['was_engaged'] else ' (not engaged)'}",
            markup=False,
        )
        _list(data["audits"])
    else:
        out.print(f"{how} {data['holds']} held decision(s); brake disengaged", markup=False)
    if not dry_run and not yes:
        err.print(f"error: nothing done: `auditrec brake {verb}` needs --yes", markup=False)
        sys.exit(2)


_reason = click.option("--reason", help="Why (recorded with each event).")
_dry = click.option("--dry-run", is_flag=True, help="List what it would touch; do nothing.")
_yes = click.option("--yes", is_flag=True, help="Do it (without --yes: a dry run, exit 2).")
_json = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@brake.command()
@_reason
@_dry
@_yes
@_json
@click.pass_context
@handle_errors
def release(
    ctx: click.Context, reason: str | None, dry_run: bool, yes: bool, as_json: bool
) -> None:
    """Let every held failure take effect (the audits fail) and disengage the brake."""
    _end(ctx, "released", reason, dry_run, yes, as_json)


@brake.command()
@_reason
@_dry
@_yes
@_json
@click.pass_context
@handle_errors
def discard(
    ctx: click.Context, reason: str | None, dry_run: bool, yes: bool, as_json: bool
) -> None:
    """Drop every held failure (the audits keep running and are probed again) and disengage
    the brake."""
    _end(ctx, "discarded", reason, dry_run, yes, as_json)
