"""``auditrec backtest``: which recorded audits would have ended differently under other
thresholds (the same as ``GET /backtest``). Reads the projection's history; writes nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from consumers.cli.context import handle_errors, run, settings_of, with_backends
from consumers.cli.output import out, print_json
from consumers.operations.backtest import backtest as run_backtest
from consumers.operations.backtest import describe, parse_since

__all__ = ["backtest"]


@click.command()
@click.option(
    "--set",
    "assignments",
    multiple=True,
    metavar="NAME=VALUE",
    help="A policy setting to test, as configured (AUDITREC_ optional): INSTANCE_LOST_GRACE=5m, "
    "FINALIZE_GRACE=30m, MODE=shadow, BRAKE_MIN_AUDITS=0, … Repeatable.",
)
@click.option("--since", help="Only audits started since: an ISO 8601 time, or a duration (7d).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@handle_errors
def backtest(
    ctx: click.Context, assignments: tuple[str, ...], since: str | None, as_json: bool
) -> None:
    """Judge every recorded observation again under the policy in force with --set applied,
    and print the audits that would have ended differently: failed earlier or later (by how
    much), not failed, failed, or failed with another code; then a count per rule."""
    settings = settings_of(ctx)
    start = parse_since(since, datetime.now(UTC))
    data = run(
        with_backends(
            settings,
            lambda backends: run_backtest(
                backends.store.audits, backends.policy, assignments, since=start
            ),
            log=False,
            read_only=True,
        )
    )
    if as_json:
        print_json(data)
        return
    changed = ", ".join(f"{k} {v['from']} → {v['to']}" for k, v in data["changed"].items())
    out.print(f"policy tested: {changed or 'as in force (no change)'}", markup=False)
    for note in data["notes"]:
        out.print(f"note: {note}", markup=False)
    diffs = data["differences"]
    out.print(
        f"{data['audits_judged']} observed audit(s) judged again; {len(diffs)} would have "
        "ended differently",
        markup=False,
    )
    for d in diffs:
        out.print(f"  {d['audit_id']}  {d['kind']}  [{d['rule']}]  {describe(d)}", markup=False)
    if data["summary"]:
        out.print("per rule:", markup=False)
    for rule, kinds in data["summary"].items():
        counts = ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items()))
        out.print(f"  {rule}: {counts}", markup=False)
