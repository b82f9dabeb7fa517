"""``auditrec dead-letters``: the records the consumers set aside, replaying one once it is
valid, and purging the old ones (the same operations as ``/dead-letters``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from consumers.cli.braking import cli_actor
from consumers.cli.context import handle_errors, run, settings_of, with_backends
from consumers.cli.output import err, out, print_json
from consumers.operations.deadletters import (
    MAX_LIMIT,
    list_dead_letters,
    replay_dead_letter,
    show_dead_letter,
)
from consumers.operations.purging import purge_dead_letters
from statemachine.errors import InvalidInput
from statemachine.policy import parse_duration

__all__ = ["dead_letters"]

_json = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _origin(item: dict[str, Any]) -> str:
    o = item["origin"]
    return "unknown" if o["topic"] is None else f"{o['topic']}/{o['partition']}@{o['offset']}"


def _one_line(text: str, width: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


@click.group("dead-letters")
def dead_letters() -> None:
    """Records a consumer could not decode or apply, set aside on the dead-letter topic
    with the reason (once per record, every consumer's reason): list them, show one, replay
    one to its original topic, purge the old ones."""


@dead_letters.command("list")
@click.option("--limit", type=click.IntRange(1, MAX_LIMIT), default=50, show_default=True)
@click.option(
    "--consumer",
    help="Only those set aside by this consumer group, or by this component's group "
    "(projector: <group prefix>-projector).",
)
@click.option(
    "--order",
    type=click.Choice(["newest", "position"]),
    default="newest",
    show_default=True,
    help="Newest first, or by position (partition, then offset).",
)
@_json
@click.pass_context
@handle_errors
def list_(ctx: click.Context, limit: int, consumer: str | None, order: str, as_json: bool) -> None:
    """One line per dead letter: position, when, consumer, origin, reason.

    The position is PARTITION:OFFSET on the dead-letter topic (what show and replay take), the
    origin topic/partition@offset; a replayed one is marked [replayed]."""
    data = run(
        with_backends(
            settings_of(ctx),
            lambda backends: list_dead_letters(
                backends.log,
                limit=limit,
                consumer=consumer,
                order="newest" if order == "newest" else "position",
            ),
            store=False,
            init=False,
        )
    )
    if as_json:
        print_json(data)
        return
    if not data["dead_letters"]:
        out.print("no dead letters", markup=False)
    for item in data["dead_letters"]:
        replayed = " [replayed]" if item["replayed"] else ""
        out.print(
            f"{item['position']}  {item['at']}  {item['consumer']}  {_origin(item)}  "
            f"{_one_line(item['reason'])}{replayed}",
            markup=False,
        )


@dead_letters.command()
@click.argument("position")
@_json
@click.pass_context
@handle_errors
def show(ctx: click.Context, position: str, as_json: bool) -> None:
    """The dead letter at POSITION (PARTITION:OFFSET): the reason, the original bytes (as
    text when UTF-8, else base64), and the envelope it decodes to today."""
    data = run(
        with_backends(
            settings_of(ctx),
            lambda backends: show_dead_letter(backends.log, position),
            store=False,
            init=False,
        )
    )
    if as_json:
        print_json(data)
        return
    lines = [
        f"position: {data['position']}",
        f"at:       {data['at']}",
        f"consumer: {', '.join(dict.fromkeys(r['consumer'] for r in data['reasons']))}",
        f"origin:   {_origin(data)}",
        f"key:      {data['key']}",
        *(f"reason:   {r['reason']}  ({r['consumer']})" for r in data["reasons"]),
        f"original ({data['original']['encoding']}, {data['original_size']} bytes"
        f"{', truncated' if data['original_truncated'] else ''}):",
        f"  {data['original']['value']}",
    ]
    if data["decodes"]:
        lines += ["decodes today as:", json.dumps(data["decoded"], indent=2)]
    else:
        lines.append(f"still does not decode: {data['decode_error']}")
    mark = data["replayed"]
    if mark:
        lines.append(
            f"replayed {mark['at']} by {mark['actor']} as event {mark['event_id']} "
            f"(from dead letter {mark['dead_letter']})"
        )
    for line in lines:
        out.print(line, markup=False)


@dead_letters.command()
@click.argument("position")
@click.option(
    "--body",
    "body_file",
    type=click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path),
    help="A corrected envelope (JSON) to publish instead of the original; - for stdin.",
)
@click.option("--dry-run", is_flag=True, help="Validate and say what would be published.")
@_json
@click.pass_context
@handle_errors
def replay(
    ctx: click.Context, position: str, body_file: Path | None, dry_run: bool, as_json: bool
) -> None:
    """Publish the record of the dead letter at POSITION to its original topic again, once
    it decodes with today's codec (older versions are upcast); once per original record."""
    body: bytes | None = None
    if body_file is not None:
        body = sys.stdin.buffer.read() if str(body_file) == "-" else body_file.read_bytes()
    data = run(
        with_backends(
            settings_of(ctx),
            lambda backends: replay_dead_letter(
                backends.log, position, actor=cli_actor(), body=body, dry_run=dry_run
            ),
            store=False,
        )
    )
    if as_json:
        print_json(data)
        return
    target = data["origin"]["topic"]
    if data["published"]:
        out.print(f"replayed {position} to {target} as event {data['event_id']}", markup=False)
    elif data["dry_run"]:
        out.print(
            f"would replay {position} to {target} as {data['type']} {data['event_id']}",
            markup=False,
        )
    else:
        mark = data["replayed"]
        out.print(
            f"already replayed {mark['at']} by {mark['actor']} as event {mark['event_id']}"
            " (nothing published)",
            markup=False,
        )


@dead_letters.command()
@click.option(
    "--older-than",
    required=True,
    help="Remove the dead letters written longer ago than this (30d, 12h).",
)
@click.option("--yes", is_flag=True, help="Do it (without --yes: count only, exit 2).")
@_json
@click.pass_context
@handle_errors
def purge(ctx: click.Context, older_than: str, yes: bool, as_json: bool) -> None:
    """Remove the dead letters (and the notes and marks among them) written longer ago than
    --older-than. Recorded: a purge mark naming you on each partition purged, a log line and
    a metric. Without --yes it only counts, and exits 2."""
    try:
        age = parse_duration(older_than)
    except ValueError as exc:
        raise InvalidInput(f"--older-than: {exc}") from None
    data = run(
        with_backends(
            settings_of(ctx),
            lambda backends: purge_dead_letters(
                backends.log, age, actor=cli_actor(), dry_run=not yes
            ),
            store=False,
        )
    )
    if as_json:
        print_json(data)
    else:
        verb = "purged" if yes else "would purge"
        out.print(
            f"{verb} {data['dead_letters']} dead letter(s) ({data['records']} record(s)) "
            f"written before {data['cutoff']}",
            markup=False,
        )
        for part in data["partitions"]:
            out.print(
                f"  partition {part['partition']}: offsets {part['from']}..{part['to'] - 1}, "
                f"{part['dead_letters']} dead letter(s)",
                markup=False,
            )
    if not yes:
        err.print("error: nothing purged: `auditrec dead-letters purge` needs --yes", markup=False)
        sys.exit(2)
