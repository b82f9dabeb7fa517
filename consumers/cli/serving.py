"""Commands that set up and run auditrec: ``init``, ``serve``, ``rebuild``."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

import click
import structlog

from consumers.cli.context import handle_errors, run, settings_of, with_backends
from consumers.cli.output import out, print_json
from consumers.runtime.names import COMPONENTS
from statemachine.errors import ConfigError

__all__ = ["init", "rebuild", "serve"]

log = structlog.get_logger("auditrec")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
@handle_errors
def init(ctx: click.Context, as_json: bool) -> None:
    """Create topics and tables (idempotent), and register the outcome feed's endpoints: each
    receives the outcomes of events recorded from its first registration on (here or at
    `serve`); and the watched workflows: only their instances created from their first
    registration on can be orphans."""
    settings = settings_of(ctx)
    endpoints = settings.outcome_endpoints()

    async def work(backends: Any) -> dict[str, Any]:
        created = await backends.log.init()
        version = await backends.store.init()
        now = datetime.now(UTC)
        since = {
            e.name: (await backends.store.deliveries.register(e.name, e.target, now)).isoformat()
            for e in endpoints
        }
        watched = await backends.store.orphans.watch(settings.watched_workflows(), now)
        return {
            "topics_created": created,
            "topics": list(backends.topics.all()),
            "schema_version": version,
            "outcome_endpoints": since,
            "watched_workflows": {w: at.isoformat() for w, at in sorted(watched.items())},
        }

    result = run(with_backends(settings, work, init=False))
    if as_json:
        print_json(result)
    else:
        out.print(
            f"topics: {', '.join(result['topics'])} (created: {len(result['topics_created'])})"
        )
        out.print(f"projection schema version {result['schema_version']}")
        for name, since in result["outcome_endpoints"].items():
            out.print(f"outcome endpoint {name}: outcomes from {since}", markup=False)
        for name, since in result["watched_workflows"].items():
            out.print(f"workflow {name}: watched since {since}", markup=False)


@click.command()
@click.option(
    "--only",
    help=f"Comma-separated components: {','.join(COMPONENTS)}",
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
    from consumers.runtime.collector import tune_gc
    from consumers.runtime.exposition import serve_metrics

    obj = ctx.ensure_object(dict)
    obj["overrides"].update(api_host=host, api_port=port)
    settings = settings_of(ctx)
    names = parse_components(only)
    if until_idle:
        names = [n for n in names if n != "api"]
    if "api" in names:
        # Bad or short tokens, or an open API beyond loopback: refused before starting.
        refusal = settings.api_refusal()
        if refusal is not None:
            raise ConfigError(refusal)
        if not settings.api_token_specs():
            log.warning(
                "the API has no tokens: anyone who reaches it may read and change the record "
                "(set AUDITREC_API_TOKENS)",
                host=settings.api_host,
                allowed_hosts=sorted(settings.allowed_hosts()),
            )

    async def work() -> int:
        tune_gc()
        backends = Backends(settings)
        service = Service(backends, names)
        try:
            # The API first: /healthz answers at once, /readyz says what is still starting.
            await service.start_early(["api"])
            await backends.start(wait=300.0)
            await service.start(wait=300.0)
        except BaseException:
            await service.stop()
            await backends.stop()
            raise
        if "api" not in names and not until_idle:
            serve_metrics(settings.api_host, settings.metrics_port)
        async with backends, service:
            if until_idle:
                drained = await service.run_until_idle()
                return 0 if drained else 1
            service.install_signal_handlers()
            await service.run()
            return 0

    sys.exit(run(work()))


@click.command()
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
@handle_errors
def rebuild(ctx: click.Context, yes: bool) -> None:
    """Rebuild the projection from the log.

    Refuses while a projector runs. Over a trimmed log (AUDITREC_KAFKA_LIFECYCLE_RETENTION),
    what the log no longer holds is taken from the projection's history (audit_events)."""
    from consumers.operations.rebuild import rebuild_projection

    settings = settings_of(ctx)
    if not yes and sys.stdin.isatty():
        click.confirm("Empty the audits table and rebuild it from the log?", abort=True)
    count = run(
        with_backends(
            settings, lambda backends: rebuild_projection(backends, progress=sys.stderr.isatty())
        )
    )
    out.print(f"rebuilt the projection from {count} event(s)")
