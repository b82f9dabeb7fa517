"""Commands that explain or try auditrec: ``diagram``, ``schema``, ``demo``,
``simulate-workflows``."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from consumers.cli.context import handle_errors, run, settings_of
from consumers.cli.output import out, print_json
from statemachine.machine import mermaid

__all__ = ["asyncapi", "demo", "diagram", "schema", "simulate_workflows"]


@click.command()
def diagram() -> None:
    """The state machine as mermaid, drawn from the transition table."""
    click.echo(mermaid(), nl=False)


@click.command()
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write DIR/public/*.json, DIR/publish/*.json, DIR/internal/*.json and DIR/index.json.",
)
@click.option(
    "--variant",
    type=click.Choice(["public", "publish", "internal"]),
    help="Print only this variant (without --out).",
)
def schema(out_dir: Path | None, variant: str | None) -> None:
    """JSON Schemas of all event types, generated from the models.

    \b
    public/   the types other services publish, as on the log (Kafka producers)
    publish/  the same as sent through auditrec (POST /events, publish): event_id,
              occurred_at, schema_version and producer may be omitted
    internal/ the types only auditrec writes, as on the log
    index.json  every type's schema_version, topic, visibility and files

    Each schema's $id is https://auditrec.dev/schemas/v{schema_version}/{variant}/{Type}.json.
    Without --out, prints {variant: {Type: schema}} as JSON.
    """
    from consumers.operations.contracts.schemas import schema_files, write_schemas

    if out_dir is None:
        grouped: dict[str, dict[str, object]] = {}
        for relative, body in schema_files().items():
            kind, _, file = relative.rpartition("/")
            if kind and variant in (None, kind):
                grouped.setdefault(kind, {})[file.removesuffix(".json")] = body
        print_json(grouped[variant] if variant else grouped)
        return
    written = write_schemas(out_dir)
    out.print(f"wrote {len(written)} files to {out_dir}")


@click.command()
@click.option(
    "--out",
    "out_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the document to FILE instead of printing it.",
)
@click.pass_context
@handle_errors
def asyncapi(ctx: click.Context, out_file: Path | None) -> None:
    """The AsyncAPI 3 document of the topics (JSON), for this configuration's topic prefix,
    consumer groups and Kafka brokers: every message with its schema, key, headers and
    examples, and which component sends and receives it."""
    import json

    from consumers.operations.contracts.asyncapi import asyncapi_for

    document = asyncapi_for(settings_of(ctx))
    if out_file is None:
        print_json(document)
        return
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    out.print(f"wrote {out_file}")


@click.command()
@click.option(
    "--dir",
    "work_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to keep the demo's files (default: a temporary folder).",
)
@click.option(
    "--serve",
    "serve_after",
    is_flag=True,
    help="Then keep the simulator and every component of `serve` running on the demo's files, "
    "the API and console on 127.0.0.1 with a token made for this run (printed once), until "
    "Ctrl-C.",
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=8080,
    show_default=True,
    help="The API's and the console's port with --serve.",
)
@handle_errors
def demo(work_dir: Path | None, serve_after: bool, port: int) -> None:
    """A scripted end-to-end run on the embedded default with the built-in simulator; with
    --serve, then the console on the demo's audits."""
    from consumers.cli.demo import run_demo

    sys.exit(run(run_demo(work_dir, out, port if serve_after else None)))


def _non_empty(ids: tuple[str, ...]) -> tuple[str, ...]:
    if any(not i for i in ids):
        raise click.BadParameter("a queue id must not be empty")
    return ids


def _webhooks(specs: tuple[str, ...]) -> tuple[tuple[str, str | None], ...]:
    from pydantic import ValidationError

    from consumers.workflows.simulator.bodies import WebhookBody

    receivers = []
    for spec in specs:
        name, _, secret = spec.partition("=")
        if not name or "/" in name:
            raise click.BadParameter(f"{spec!r}: NAME must be non-empty and contain no '/'")
        try:
            WebhookBody(secret=secret or None)
        except ValidationError as exc:
            raise click.BadParameter(f"{name}: {exc.errors()[0]['msg']}") from None
        receivers.append((name, secret or None))
    return tuple(receivers)


@click.command("simulate-workflows")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8787, show_default=True)
@click.option(
    "--token",
    envvar="AUDITREC_SIMULATOR_TOKEN",
    help="Require this bearer token on the API and the /_sim control API.",
)
@click.option(
    "--seed", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="JSON seed file."
)
@click.option(
    "--queue",
    "queues",
    multiple=True,
    metavar="ID",
    callback=lambda _ctx, _param, ids: _non_empty(ids),
    help="Serve a Cloudflare Queue with this id, subscribed to every event of every workflow, "
    "for an HTTP pull consumer (repeatable).",
)
@click.option(
    "--webhook",
    "webhooks",
    multiple=True,
    metavar="NAME[=SECRET]",
    callback=lambda _ctx, _param, specs: _webhooks(specs),
    help="Create a webhook receiver for the outcome feed at /_sim/webhooks/NAME; with a "
    "Standard Webhooks SECRET (whsec_...) it refuses deliveries not signed with it (repeatable).",
)
@handle_errors
def simulate_workflows(
    host: str,
    port: int,
    token: str | None,
    seed: Path | None,
    queues: tuple[str, ...],
    webhooks: tuple[tuple[str, str | None], ...],
) -> None:
    """Run the Cloudflare Workflows API simulator.

    Point auditrec at it with AUDITREC_CLOUDFLARE_API_URL=http://HOST:PORT/client/v4 (and,
    with --token or AUDITREC_SIMULATOR_TOKEN, AUDITREC_CLOUDFLARE_API_TOKEN set to the same
    token; any account id will do).

    \b
    A seed file (--seed) is JSON; every key is optional:
      {"workflows": ["site-audit"],
       "latency_ms": 50,
       "listing": true,
       "instances": [{"id": "wf-1", "status": "errored", "workflow": "site-audit",
                      "error": {"name": "Error", "message": "Worker exceeded memory limit"},
                      "start": "2026-12-01T08:00:00Z", "end": "2026-12-01T09:00:00Z"}],
       "faults": [{"id": "wf-2", "kind": "rate_limit", "retry_after": 30, "times": 1}],
       "queues": [{"id": "q-1", "workflows": ["site-audit"], "events": ["instance.errored"],
                   "max_retries": 3, "faults": {"duplicate": 0.1, "seed": 7}}],
       "webhooks": [{"name": "demo", "secret": null, "fail": 1}]}
    Statuses: queued, running, paused, errored, terminated, complete, waiting,
    waitingForPause, rollingBack, unknown. Fault kinds: latency, rate_limit, server_error,
    success_false, forbidden, malformed, custom, none; a fault on the id "@instances" applies
    to the instance listing. "listing": false serves no listing (404). A queue receives a
    message on every status change of its workflows' instances, pulled and acknowledged at
    /client/v4/accounts/ANY/queues/ID/messages/pull and .../ack. Queue faults: duplicate and
    drop (chances 0..1), delay_ms, reorder, pull_error {"http_status": 429|500|502|503,
    "times", "retry_after"}, seed. A webhook receiver (--webhook) records every delivery,
    read with GET /_sim/webhooks/NAME; it needs no token.
    The control API (/_sim/...) changes all of it while it runs: see docs/guides/running.md."""
    from consumers.workflows.simulator.server import run_simulator

    run_simulator(host, port, token, seed, queues, webhooks)
