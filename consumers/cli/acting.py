"""Operator actions from the command line: ``auditrec fail``, ``auditrec restore``,
``auditrec probe`` (:mod:`consumers.operations.actions` does the work; the HTTP API calls the
same). Each records who runs it, ``cli:<os user>``, as the actor; ``--operator NAME`` names the
person acted for, recorded beside it as ``on_behalf_of`` (never as the actor: a name given on
the command line proves nothing).

``fail`` and ``restore`` take one audit id, or a filter (``--status``, ``--code``,
``--project``, ``--older-than``) for the bulk form: without ``--yes`` a bulk form only lists
what it would touch and exits 2, saying on stderr that it needs ``--yes`` (as ``brake
release`` does); with ``--yes`` it acts. ``--dry-run`` says what a single or bulk action
would do without publishing (exit 0).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from consumers.cli.braking import cli_actor
from consumers.cli.context import check_audit_id, handle_errors, run, settings_of, with_backends
from consumers.cli.output import err, out, print_json
from consumers.operations.listing import AUDIT_STATUSES, AuditFilter
from statemachine.errors import InvalidInput
from statemachine.policy import parse_duration
from statemachine.vocabulary import ERROR_CODES

__all__ = ["fail", "probe", "restore"]


def _act(ctx: click.Context, operator: str | None, work: Callable[[Any], Any]) -> Any:
    from consumers.cli.assembly import operations
    from consumers.operations.actions import Actions

    settings = settings_of(ctx)
    actor = cli_actor()
    return run(
        with_backends(
            settings, lambda backends: work(Actions(operations(backends), actor, operator))
        )
    )


def _filter(
    status: str | None, code: str | None, project: str | None, older_than: str | None
) -> AuditFilter | None:
    if status is None and code is None and project is None and older_than is None:
        return None
    try:
        age = parse_duration(older_than) if older_than is not None else None
    except ValueError as exc:
        raise InvalidInput(f"--older-than: {exc}") from None
    return AuditFilter(status, project, code, age)


def _target(audit_id: str | None, where: AuditFilter | None, command: str) -> None:
    if audit_id is not None and where is not None:
        raise InvalidInput(f"{command}: give an audit id or a filter (--status, …), not both")
    if audit_id is None and where is None:
        raise InvalidInput(
            f"{command}: give an audit id, or a filter (--status, --code, --project, "
            "--older-than) for the bulk form"
        )
    if audit_id is not None:
        check_audit_id(audit_id)


def _show(data: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(data)
    else:
        out.print(data["message"], markup=False)


def _show_bulk(data: dict[str, Any], as_json: bool, command: str, asked: bool) -> None:
    """The bulk action's result (or preview); a preview not ``asked`` for with ``--dry-run``
    ends the command with exit 2: it needs ``--yes``."""
    if as_json:
        print_json(data)
    else:
        verb = f"would {command}" if data["dry_run"] else f"{command}: done for"
        out.print(
            f"{verb} {data['acted']} of {data['matched']} matching audit(s)"
            + (f" (only the first {data['matched']} looked at)" if data["truncated"] else ""),
            markup=False,
        )
        for r in data["results"]:
            out.print(f"  {r['audit_id']}  {r['before']} → {r['after']}", markup=False)
        for r in data["skipped"]:
            out.print(f"  skipped {r['audit_id']}: {r['message']}", markup=False)
    if not data["dry_run"]:
        return
    if asked:
        if not as_json:
            err.print(
                f"dry run: nothing published; `auditrec {command} … --yes` acts", markup=False
            )
        return
    err.print(
        f"error: nothing done: the bulk `auditrec {command}` needs --yes (--dry-run only lists)",
        markup=False,
    )
    sys.exit(2)


_operator = click.option(
    "--operator",
    metavar="NAME",
    help="The person you act for, recorded as on_behalf_of beside the actor (cli:<os user>).",
)
_json = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
_bulk = [
    click.option("--status", type=click.Choice(AUDIT_STATUSES), help="Bulk: status."),
    click.option("--project", help="Bulk: only this project id."),
    click.option("--older-than", help="Only audits started longer ago than this (2h, 1d)."),
    click.option("--yes", is_flag=True, help="Bulk form: act (without it, only list, and exit 2)."),
    click.option("--dry-run", is_flag=True, help="Say what would happen; publish nothing."),
]


def _bulk_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(_bulk):
        fn = option(fn)
    return fn


@click.command()
@click.argument("audit_id", required=False)
@click.option(
    "--code", required=True, type=click.Choice(ERROR_CODES), help="The error code to fail with."
)
@click.option("--reason", required=True, help="Why (the failure's detail).")
@_bulk_options
@_operator
@_json
@click.pass_context
@handle_errors
def fail(
    ctx: click.Context,
    audit_id: str | None,
    code: str,
    reason: str,
    status: str | None,
    project: str | None,
    older_than: str | None,
    yes: bool,
    dry_run: bool,
    operator: str | None,
    as_json: bool,
) -> None:
    """Fail a running audit (AuditFailed by operator), or every running audit a filter
    (--status, --project, --older-than) selects: listed only (exit 2), unless --yes."""
    where = _filter(status, None, project, older_than)
    _target(audit_id, where, "fail")
    if where is not None:
        bulk = _act(
            ctx,
            operator,
            lambda a: a.fail_many(where, code, reason, dry_run=dry_run or not yes),
        )
        _show_bulk(bulk.as_dict(), as_json, "fail", dry_run)
        return
    assert audit_id is not None
    one = _act(ctx, operator, lambda a: a.fail(audit_id, code, reason, dry_run=dry_run))
    _show(one.as_dict(), as_json)


@click.command()
@click.argument("audit_id", required=False)
@click.option("--reason", required=True, help="Why the failure is undone.")
@click.option("--code", type=click.Choice(ERROR_CODES), help="Bulk: only failures with this code.")
@_bulk_options
@_operator
@_json
@click.pass_context
@handle_errors
def restore(
    ctx: click.Context,
    audit_id: str | None,
    reason: str,
    code: str | None,
    status: str | None,
    project: str | None,
    older_than: str | None,
    yes: bool,
    dry_run: bool,
    operator: str | None,
    as_json: bool,
) -> None:
    """Undo a failure by the reconciler or an operator (AuditRestored): the audit runs again.
    A workflow's own failure is never undone. The bulk form (--code, --status, --project,
    --older-than) restores every such failure it selects: listed only (exit 2), unless
    --yes."""
    where = _filter(status, code, project, older_than)
    _target(audit_id, where, "restore")
    if where is not None:
        bulk = _act(
            ctx, operator, lambda a: a.restore_many(where, reason, dry_run=dry_run or not yes)
        )
        _show_bulk(bulk.as_dict(), as_json, "restore", dry_run)
        return
    assert audit_id is not None
    one = _act(ctx, operator, lambda a: a.restore(audit_id, reason, dry_run=dry_run))
    _show(one.as_dict(), as_json)


@click.command()
@click.argument("audit_id")
@click.option("--inline", is_flag=True, help="Without a running serve, reconcile in this process.")
@_operator
@_json
@click.pass_context
@handle_errors
def probe(
    ctx: click.Context, audit_id: str, inline: bool, operator: str | None, as_json: bool
) -> None:
    """Probe a running audit now (trigger manual), whenever it was last observed, and show
    what the reconciler made of the answer.

    Needs a running auditrec serve (or --inline)."""
    check_audit_id(audit_id)
    result = _act(ctx, operator, lambda a: a.probe(audit_id, inline=inline))
    data = result.as_dict()
    if as_json:
        print_json(data)
        return
    outcome = data["outcome"] or {}
    out.print(
        f"probed {audit_id}: {data['before']} → {data['after']}"
        f" ({outcome.get('result', 'pending')}): {data['message']}",
        markup=False,
    )
