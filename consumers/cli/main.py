"""The ``auditrec`` command line: the group and its commands. Exit codes: 0 ok, 1 runtime
failure, 2 invalid input."""

from __future__ import annotations

import click

from consumers.cli import (
    acting,
    auditing,
    backtest,
    braking,
    deadletters,
    deliveries,
    doctor,
    explaining,
    orphans,
    serving,
)
from consumers.runtime.logs import configure_logging

__all__ = ["main"]


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


for command in (
    serving.init,
    serving.serve,
    auditing.publish,
    auditing.status,
    auditing.audits,
    auditing.sweep,
    auditing.replay,
    braking.brake,
    deadletters.dead_letters,
    deliveries.deliveries,
    orphans.orphans,
    backtest.backtest,
    acting.fail,
    acting.restore,
    acting.probe,
    serving.rebuild,
    doctor.doctor,
    explaining.diagram,
    explaining.schema,
    explaining.asyncapi,
    explaining.demo,
    explaining.simulate_workflows,
):
    main.add_command(command)
