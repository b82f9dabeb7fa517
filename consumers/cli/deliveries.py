"""``auditrec deliveries``: the outcome feed's endpoints, the entries parked on them, and
retrying them (the same operations as ``/deliveries``)."""

from __future__ import annotations

import sys
from typing import Any

import click

from consumers.cli.braking import cli_actor
from consumers.cli.context import handle_errors, run, settings_of, with_backends
from consumers.cli.output import err, out, print_json
from consumers.operations.deliveries import MAX_LIMIT, list_deliveries, retry_deliveries

__all__ = ["deliveries"]

_json = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
_endpoint = click.option("--endpoint", help="Only this endpoint (webhook-<8 hex>, queue-<id>).")


def _line(entry: dict[str, Any]) -> str:
    asked = (
        f"  [retry asked by {entry['retry_requested_by']}]"
        if entry["retry_requested_at"] is not None
        else ""
    )
    return (
        f"{entry['outcome_id']}  {entry['endpoint']}  {entry['type']}  {entry['audit_id']}  "
        f"parked {entry['parked_at']:%Y-%m-%d %H:%M:%S}Z  attempts {entry['attempts']}  "
        f"{entry['error']}{asked}"
    )


@click.group()
def deliveries() -> None:
    """The outcome feed's endpoints and the entries parked on them (not delivered within
    AUDITREC_WEBHOOK_RETRY_FOR, and those of their audits behind them): list them, retry
    them."""


@deliveries.command("list")
@_endpoint
@click.option("--limit", type=click.IntRange(1, MAX_LIMIT), default=100, show_default=True)
@_json
@click.pass_context
@handle_errors
def list_(ctx: click.Context, endpoint: str | None, limit: int, as_json: bool) -> None:
    """The endpoints, then one line per parked entry, oldest first: its id, endpoint, type,
    audit, when it was parked, its attempts and its last error."""
    settings = settings_of(ctx)
    data = run(
        with_backends(
            settings,
            lambda backends: list_deliveries(
                backends.store, settings, endpoint=endpoint, limit=limit
            ),
            log=False,
            read_only=True,
        )
    )
    if as_json:
        print_json(data)
        return
    if not data["endpoints"]:
        out.print(
            "no endpoints: set AUDITREC_WEBHOOK_URLS or AUDITREC_OUTCOME_QUEUE_ID", markup=False
        )
    for e in data["endpoints"]:
        types = f"  only {', '.join(e['types'])}" if e["types"] else ""
        where = e["target"] or "(not configured here)"
        out.print(f"{e['name']}  {where}  parked {e['parked']}{types}", markup=False)
    if not data["parked"]:
        out.print("nothing parked", markup=False)
        return
    for entry in data["parked"]:
        out.print(_line(entry), markup=False)
    if data["next_after"] is not None:
        out.print(f"… {data['total'] - len(data['parked'])} more (--limit)", markup=False)


@deliveries.command()
@click.argument("ids", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Retry every parked entry.")
@_endpoint
@click.option("--dry-run", is_flag=True, help="List what it would retry; do nothing.")
@click.option("--yes", is_flag=True, help="Do it (without --yes: a dry run, exit 2).")
@_json
@click.pass_context
@handle_errors
def retry(
    ctx: click.Context,
    ids: tuple[str, ...],
    every: bool,
    endpoint: str | None,
    dry_run: bool,
    yes: bool,
    as_json: bool,
) -> None:
    """Deliver parked entries again: the IDs named (each with every entry of its audit parked
    on the same endpoint, in order), or --all. The endpoint's feed, wherever it runs, sends
    them within seconds; one that fails again is parked again."""
    if bool(ids) == every:
        err.print(
            "error: name the parked entries to retry (IDS), or --all (not both)", markup=False
        )
        sys.exit(2)
    settings = settings_of(ctx)
    preview = dry_run or not yes
    data = run(
        with_backends(
            settings,
            lambda backends: retry_deliveries(
                backends.store,
                settings,
                outcome_ids=None if every else list(ids),
                endpoint=endpoint,
                actor=cli_actor(),
                dry_run=preview,
            ),
            log=False,
            read_only=True,
        )
    )
    if as_json:
        print_json(data)
    else:
        verb = "would retry" if preview else "retrying"
        out.print(f"{verb} {len(data['entries'])} parked entries:", markup=False)
        for entry in data["entries"]:
            out.print(f"  {_line(entry)}", markup=False)
    if not dry_run and not yes:
        err.print("error: nothing done: `auditrec deliveries retry` needs --yes", markup=False)
        sys.exit(2)
