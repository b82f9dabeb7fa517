"""The ``auditrec`` command line. Exit codes: 0 ok, 1 runtime failure, 2 invalid input."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Coroutine
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click

from consumers.cli.output import audits_table, err, out, print_json, replay_table
from consumers.runtime.logs import configure_logging
from consumers.runtime.settings import Settings, load_settings
from projections.row import row_dict
from statemachine.errors import AuditrecError, InvalidInput
from statemachine.events import EVENT_TYPES
from statemachine.machine import mermaid
from statemachine.vocabulary import AUDIT_ID_RULE, is_audit_id

__all__ = ["main"]

T = TypeVar("T")


def _settings(ctx: click.Context) -> Settings:
    """The settings, read once (pydantic-settings: environment and flags), and the logging
    they ask for. Commands that print data log warnings only unless a level is set."""
    obj = ctx.ensure_object(dict)
    if "settings" not in obj:
        settings = load_settings(**obj.get("overrides", {}))
        level = settings.log_level if "log_level" in settings.model_fields_set else None
        configure_logging(level or obj.get("default_level", "INFO"), settings.log_format)
        obj["settings"] = settings
    result: Settings = obj["settings"]
    return result


def _run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except InvalidInput as exc:
            if exc.problems != [str(exc)]:
                for problem in exc.problems:
                    err.print(problem, markup=False)
            err.print(f"error: {exc}", markup=False)
            sys.exit(2)
        except AuditrecError as exc:
            err.print(f"error: {exc}", markup=False)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            sys.exit(130)

    return wrapper


def _check_audit_id(audit_id: str) -> None:
    if not is_audit_id(audit_id):
        raise InvalidInput(f"invalid audit id {audit_id!r}: {AUDIT_ID_RULE}")


async def _with_runtime(
    settings: Settings, fn: Callable[[Any], Awaitable[T]], *, log: bool = True
) -> T:
    """Run ``fn`` on a started runtime; ``log=False`` for commands that only read the
    projection (they then work while the event log is unreachable)."""
    from consumers.operations.backends import Backends

    rt = Backends(settings)
    await rt.start(with_log=log)
    try:
        return await fn(rt)
    finally:
        await rt.stop()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--event-log-url", help="sqlite:///path or kafka://host:9092 (AUDITREC_EVENT_LOG_URL)"
)
@click.option("--database-url", help="sqlite:///path or postgresql://… (AUDITREC_DATABASE_URL)")
@click.option("--log-level", default=None, help="DEBUG, INFO, WARNING… (AUDITREC_LOG_LEVEL)")
@click.version_option(package_name="auditrec")
@click.pass_context
def main(
    ctx: click.Context, event_log_url: str | None, database_url: str | None, log_level: str | None
) -> None:
    """auditrec keeps an audit table honest: it reconciles audits whose workflows died."""
    ctx.ensure_object(dict)["overrides"] = {
        "event_log_url": event_log_url,
        "database_url": database_url,
        "log_level": log_level,
    }
    quiet = ctx.invoked_subcommand not in ("serve", "simulate-workflows")
    ctx.obj["default_level"] = "WARNING" if quiet else "INFO"
    # Until the settings are read (and for commands that need none): the default logging.
    configure_logging(log_level or ctx.obj["default_level"], "auto")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@handle_errors
def init(ctx: click.Context, as_json: bool) -> None:
    """Create topics and tables (idempotent)."""
    settings = _settings(ctx)

    async def work(rt: Any) -> dict[str, Any]:
        created = await rt.log.init()
        version = await rt.store.init()
        return {
            "topics_created": created,
            "topics": list(rt.topics.all()),
            "schema_version": version,
        }

    result = _run(_with_runtime_noinit(settings, work))
    if as_json:
        print_json(result)
    else:
        out.print(
            f"topics: {', '.join(result['topics'])} (created: {len(result['topics_created'])})"
        )
        out.print(f"projection schema version {result['schema_version']}")


async def _with_runtime_noinit(settings: Settings, fn: Callable[[Any], Awaitable[T]]) -> T:
    from consumers.operations.backends import Backends

    rt = Backends(settings)
    await rt.start(init=False)
    try:
        return await fn(rt)
    finally:
        await rt.stop()


@main.command()
@click.option(
    "--only", help="Comma-separated components: projector,reconciler,probe,watchdog,telemetry,api"
)
@click.option(
    "--until-idle", is_flag=True, help="Drain all work (one watchdog tick included), then exit."
)
@click.option("--host", help="API host (AUDITREC_API_HOST).")
@click.option("--port", type=int, help="API port (AUDITREC_API_PORT).")
@click.pass_context
@handle_errors
def serve(
    ctx: click.Context, only: str | None, until_idle: bool, host: str | None, port: int | None
) -> None:
    """Run the components (all by default)."""
    from consumers.cli.assembly import Service, parse_components
    from consumers.operations.backends import Backends
    from consumers.runtime.supervision import tune_gc

    obj = ctx.ensure_object(dict)
    obj["overrides"].update(api_host=host, api_port=port)
    settings = _settings(ctx)
    names = parse_components(only)
    if until_idle:
        names = [n for n in names if n != "api"]

    async def work() -> int:
        tune_gc()
        rt = Backends(settings)
        await rt.start(wait=300.0)
        service = Service(rt, names)
        await service.start(wait=300.0)
        async with rt, service:
            if until_idle:
                drained = await service.run_until_idle()
                return 0 if drained else 1
            service.install_signal_handlers()
            await service.run()
            return 0

    sys.exit(_run(work()))


@main.command()
@click.argument("file", type=click.File("r", encoding="utf-8"))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@handle_errors
def publish(ctx: click.Context, file: Any, as_json: bool) -> None:
    """Publish JSON Lines envelopes from FILE (or - for stdin). All lines are validated first."""
    from consumers.cli.assembly import operations
    from consumers.operations.publishing import parse_json_lines

    try:
        lines = file.readlines()
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{file.name}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    events = parse_json_lines(lines)
    settings = _settings(ctx)
    ids = _run(_with_runtime(settings, lambda rt: operations(rt).publish(events)))
    if as_json:
        print_json({"published": len(ids), "event_ids": ids})
    else:
        out.print(f"published {len(ids)} event(s)")


@main.command()
@click.argument("audit_id")
@click.option("--no-probe", is_flag=True, help="Read the projection only; do not probe.")
@click.option("--inline", is_flag=True, help="Without a running serve, reconcile in this process.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@handle_errors
def status(ctx: click.Context, audit_id: str, no_probe: bool, inline: bool, as_json: bool) -> None:
    """Reconcile one audit on demand, then show it."""
    from consumers.cli.assembly import operations

    _check_audit_id(audit_id)
    settings = _settings(ctx)
    result = _run(
        _with_runtime(
            settings,
            lambda rt: operations(rt).status(audit_id, probe=not no_probe, inline=inline),
            log=not no_probe,
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
        if value is not None:
            out.print(f"{key:>22}  {value}", markup=False)
    if result.outcome is not None and result.outcome.reason:
        out.print(f"{'reconciliation':>22}  {result.outcome.reason}", markup=False)


@main.command()
@click.option("--status", "status_", type=click.Choice(["running", "completed", "failed"]))
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@handle_errors
def audits(ctx: click.Context, status_: str | None, limit: int, as_json: bool) -> None:
    """List audits from the projection, newest first."""
    settings = _settings(ctx)
    rows = _run(
        _with_runtime(
            settings, lambda rt: rt.store.list_audits(status=status_, limit=limit), log=False
        )
    )
    if as_json:
        print_json([row_dict(r) for r in rows])
    else:
        out.print(audits_table(rows))


@main.command()
@click.option("--dry-run", is_flag=True, help="Only list the candidates.")
@click.option(
    "--inline", is_flag=True, help="Without a running serve, run the pipeline in this process."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@handle_errors
def sweep(ctx: click.Context, dry_run: bool, inline: bool, as_json: bool) -> None:
    """One watchdog tick; waits for the outcomes and prints a summary."""
    from consumers.cli.assembly import operations

    settings = _settings(ctx)
    summary = _run(
        _with_runtime(settings, lambda rt: operations(rt).sweep(dry_run=dry_run, inline=inline))
    )
    data = summary.as_dict()
    if as_json:
        print_json(data)
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
    out.print(f"  healthy     {data['healthy']}")
    out.print(f"  unchanged   {data['unchanged']}")
    out.print(f"  probe errors {sum(data['probe_errors'].values())} ({errors})")
    if data["pending"]:
        out.print(f"  pending     {data['pending']} (no outcome in time)")
    out.print(f"  took        {data['elapsed_s']}s")


@main.command()
@click.argument("audit_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@handle_errors
def replay(ctx: click.Context, audit_id: str, as_json: bool) -> None:
    """The audit's timeline: each event, state before → after, and the rule that fired."""
    from consumers.cli.assembly import operations

    settings = _settings(ctx)
    _check_audit_id(audit_id)
    steps = _run(_with_runtime(settings, lambda rt: operations(rt).replay(audit_id), log=False))
    if as_json:
        print_json([s.as_dict() for s in steps])
        return
    out.print(replay_table(audit_id, steps))


@main.command()
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
@handle_errors
def rebuild(ctx: click.Context, yes: bool) -> None:
    """Rebuild the projection from the log."""
    from consumers.operations.rebuild import rebuild_projection

    settings = _settings(ctx)
    if not yes and sys.stdin.isatty():
        click.confirm("Empty the audits table and rebuild it from the log?", abort=True)
    count = _run(
        _with_runtime(settings, lambda rt: rebuild_projection(rt, progress=sys.stderr.isatty()))
    )
    out.print(f"rebuilt the projection from {count} event(s)")


@main.command()
def diagram() -> None:
    """The state machine as mermaid."""
    click.echo(mermaid(), nl=False)


@main.command()
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write one file per type.",
)
def schema(out_dir: Path | None) -> None:
    """JSON Schemas of all event types."""
    schemas = {name: cls.model_json_schema() for name, cls in EVENT_TYPES.items()}
    if out_dir is None:
        print_json(schemas)
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, body in schemas.items():
        (out_dir / f"{name}.schema.json").write_text(json.dumps(body, indent=2) + "\n")
    out.print(f"wrote {len(schemas)} schemas to {out_dir}")


@main.command()
@click.option(
    "--dir",
    "work_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to keep the demo's files (default: a temporary folder).",
)
@handle_errors
def demo(work_dir: Path | None) -> None:
    """A scripted end-to-end run on the embedded default with the built-in simulator."""
    from consumers.cli.demo import run_demo

    sys.exit(_run(run_demo(work_dir, out)))


@main.command("simulate-workflows")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8787, show_default=True)
@click.option("--token", envvar="AUDITREC_SIMULATOR_TOKEN", help="Require this bearer token.")
@click.option(
    "--seed", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="JSON seed file."
)
@handle_errors
def simulate_workflows(host: str, port: int, token: str | None, seed: Path | None) -> None:
    """Run the Cloudflare Workflows API simulator."""
    from consumers.workflows.simulator.server import run_simulator

    err.print(
        f"Workflows API simulator on http://{host}:{port}/client/v4 (control API under /_sim/)"
    )
    run_simulator(host, port, token, seed)
