"""``auditrec doctor``: the effective configuration, then a check of every service, each
printed as ``✓ name: found`` or ``✗ name: wrong — fix: what to do``; exit 2 when ``serve``
would refuse the configuration (as ``serve`` exits), else 1 on any ✗."""

from __future__ import annotations

import sys

import click

from consumers.cli.context import handle_errors, run, settings_of
from consumers.cli.output import err, out, print_json

__all__ = ["doctor"]


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@handle_errors
def doctor(ctx: click.Context, as_json: bool) -> None:
    """Show the configuration and check the event log, the database, the Workflows API,
    PostHog and the clock (read only: creates nothing). Exit 2 when `serve` would refuse the
    configuration, 1 when a check fails otherwise."""
    from consumers.operations.doctor import diagnose, effective_configuration

    settings = settings_of(ctx)
    config = effective_configuration(settings, ctx.ensure_object(dict).get("overrides"))
    checks = run(diagnose(settings))
    ok = all(c.ok for c in checks)
    refused = [c.name for c in checks if c.refused]
    if as_json:
        print_json(
            {
                "ok": ok,
                "refused": refused,
                "config": [
                    {
                        "variable": s.variable,
                        "value": s.value,
                        "source": s.source,
                        "path": s.path,
                    }
                    for s in config
                ],
                "checks": [c.as_json() for c in checks],
            }
        )
    else:
        width = max(len(s.variable) for s in config)
        out.print("configuration", markup=False)
        for s in config:
            value = "(unset)" if s.value is None else s.value
            if s.path is not None:
                value += f" → {s.path}"
            out.print(f"  {s.variable:<{width}}  {value}  [{s.source}]", markup=False)
        out.print("checks", markup=False)
        for c in checks:
            line = f"  ✓ {c.name}: {c.detail}" if c.ok else f"  ✗ {c.name}: {c.detail}"
            if not c.ok and c.fix:
                line += f" — fix: {c.fix}"
            out.print(line, markup=False)
    if refused:
        err.print(
            f"error: `serve` refuses this configuration (see {', '.join(refused)} above)",
            markup=False,
        )
        sys.exit(2)
    sys.exit(0 if ok else 1)
