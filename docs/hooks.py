"""The reference pages' tables, made from the code each time the site is built (a MkDocs hook,
``hooks:`` in ``mkdocs.yml``), so they cannot drift from it.

A page asks for a table with a marker line, ``<!-- reference: NAME -->`` (and, on the next line,
an italic placeholder for readers of the Markdown source), which is replaced by what
``REFERENCES[NAME]`` makes of the code:

- ``cli``: click's ``--help`` of every command of ``auditrec`` (``consumers/cli/main.py``);
- ``http``: the routes of the API's OpenAPI document, with the scope each needs;
- ``configuration``: every field of the settings model (``consumers/runtime/settings.py``);
- ``metrics``: every metric of the Prometheus registry (``consumers/runtime/metrics.py``);
- ``events``: the envelope and every event type, from the published JSON Schemas
  (``consumers/operations/contracts/``).

An unknown marker, or a table no page asks for, fails the build.
"""

from __future__ import annotations

import json
import re
import tempfile
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from enum import Enum
from pathlib import Path
from typing import Any

import click
from mkdocs.exceptions import PluginError

# The marker, and the placeholder line a reader of the Markdown source sees in its place.
MARKER = re.compile(r"^<!-- reference: ([a-z-]+) -->\n(?:_[^\n]*_$)?", flags=re.MULTILINE)
WIDTH = 100  # the terminal width of the CLI's help as shown

_used: set[str] = set()


# -- MkDocs events ----------------------------------------------------------------------------


def on_pre_build(config: Any) -> None:
    _used.clear()


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    def fill(match: re.Match[str]) -> str:
        name = match[1]
        if name not in REFERENCES:
            raise PluginError(f"{page.file.src_uri}: no reference table named {name!r}")
        _used.add(name)
        return REFERENCES[name]()

    return MARKER.sub(fill, markdown)


def on_post_build(config: Any) -> None:
    missing = sorted(set(REFERENCES) - _used)
    if missing:
        raise PluginError(f"no page shows the reference table(s) {', '.join(missing)}")


# -- Markdown helpers -------------------------------------------------------------------------


def cell(text: object) -> str:
    """``text`` as one Markdown table cell: on one line, its pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def code(text: object) -> str:
    return f"`{text}`"


# -- the CLI ----------------------------------------------------------------------------------


def _commands(
    command: click.Command, path: list[str], parent: click.Context | None
) -> Iterator[tuple[list[str], click.Command, click.Context]]:
    settings = command.context_settings if parent is None else {}
    ctx = click.Context(
        command,
        info_name=path[-1],
        parent=parent,
        terminal_width=WIDTH,
        max_content_width=WIDTH,
        **settings,
    )
    yield path, command, ctx
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from _commands(sub, [*path, name], ctx)


def cli() -> str:
    from consumers.cli.main import main

    commands = list(_commands(main, ["auditrec"], None))
    summary = table(
        ("command", "does"),
        [
            (f"[`{' '.join(path[1:])}`](#{'-'.join(path)})", command.get_short_help_str(10_000))
            for path, command, _ in commands[1:]
        ],
    )
    sections = [summary]
    for path, command, ctx in commands:
        level = "#" * min(len(path) + 1, 4)
        anchor = "-".join(path)
        sections.append(
            f"{level} `{' '.join(path)}` {{#{anchor}}}\n\n```text\n{command.get_help(ctx)}\n```"
        )
    return "\n\n".join(sections)


# -- the HTTP API -----------------------------------------------------------------------------


def _openapi() -> dict[str, Any]:
    """The API's OpenAPI document as a deployment with tokens serves it (so the routes behind a
    token say so), built over backends that are never started."""
    from consumers.api.app import build_app
    from consumers.cli.assembly import operations
    from consumers.operations.backends import Backends
    from consumers.runtime.settings import Settings

    with tempfile.TemporaryDirectory() as folder:
        settings = Settings(
            event_log_url=f"sqlite:///{folder}/events.db",
            database_url=f"sqlite:///{folder}/audits.db",
            api_tokens="reader:a-secret-of-16-chars:read",
        )
        return build_app(operations(Backends(settings))).openapi()


def http() -> str:
    from consumers.api.guards import needed_scope

    document = _openapi()
    components = document.get("components", {}).get("schemas", {})
    rows = []
    details = []
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            guarded = "401" in operation.get("responses", {})
            scope = needed_scope(method.upper(), path) if guarded else "none"
            summary = operation.get("summary", "")
            anchor = f"{method}-{path}".lower()
            anchor = re.sub(r"[^a-z0-9]+", "-", anchor).strip("-")
            rows.append((code(method.upper()), f"[`{path}`](#{anchor})", code(scope), summary))
            details.append(_route(method.upper(), path, scope, operation, anchor, components))
    return table(("method", "path", "scope", "summary"), rows) + "\n\n" + "\n\n".join(details)


def _body(title: str, content: dict[str, Any], components: dict[str, Any]) -> str:
    """A request's or an answer's JSON body: its fields, or what it is in a few words."""
    schema = content.get("application/json", {}).get("schema")
    if not schema:
        return ""
    name = schema.get("$ref", "").rsplit("/", 1)[-1]
    model = components.get(name, {})
    if model.get("properties"):
        return f"{title} (`{name}`):\n\n" + _fields(model, components)
    return f"{title}: {_kind(schema, components)}."


def _route(
    method: str,
    path: str,
    scope: str,
    operation: dict[str, Any],
    anchor: str,
    components: dict[str, Any],
) -> str:
    parts = [f"### `{method} {path}` {{#{anchor}}}", operation.get("summary", "") + "."]
    if operation.get("description"):
        parts.append(operation["description"])
    parts.append(f"Scope: `{scope}`." if scope != "none" else "No token needed.")
    parameters = operation.get("parameters", [])
    if parameters:
        parts.append(
            table(
                ("parameter", "in", "type", "description"),
                [
                    (
                        code(p["name"]) + ("" if p.get("required") else " (optional)"),
                        p["in"],
                        _kind(p.get("schema", {}), {}),
                        p.get("description", ""),
                    )
                    for p in parameters
                ],
            )
        )
    body = operation.get("requestBody", {}).get("content", {})
    if body:
        parts.append(_body("Body", body, components))
    answers = operation.get("responses", {})
    for status, answer in answers.items():
        if status.startswith("2") and answer.get("content"):
            parts.append(_body(f"Answer {status}", answer["content"], components))
    parts.append(
        "Answers: "
        + ", ".join(
            f"{status} ({cell(answer.get('description', ''))})"
            for status, answer in answers.items()
        )
        + "."
    )
    return "\n\n".join(parts)


# -- configuration ----------------------------------------------------------------------------


def _duration(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _setting_type(annotation: Any, metadata: list[Any]) -> str:
    from pydantic import SecretStr

    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        annotation = args[0]
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) is typing.Literal:
        return " or ".join(code(v) for v in typing.get_args(annotation))
    names = {
        timedelta: "duration",
        SecretStr: "secret",
        Path: "path",
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
    }
    kind = names.get(annotation, getattr(annotation, "__name__", str(annotation)))
    bounds = []
    for item in metadata:
        for attribute, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            if getattr(item, attribute, None) is not None:
                bounds.append(f"{sign} {getattr(item, attribute)}")
    return kind + (f" ({', '.join(bounds)})" if bounds else "")


def _default(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, timedelta):
        return code(_duration(value))
    if isinstance(value, bool):
        return code(str(value).lower())
    if isinstance(value, Enum):
        return code(value.value)
    return code(value)


def configuration() -> str:
    from consumers.runtime.settings import Settings

    prefix = Settings.model_config.get("env_prefix", "")
    rows = []
    for name, field in Settings.model_fields.items():
        if not field.description:
            raise PluginError(f"the setting {name} has no description (its docstring)")
        rows.append(
            (
                code(f"{prefix}{name.upper()}"),
                _setting_type(field.annotation, field.metadata),
                _default(field.default),
                field.description,
            )
        )
    return table(("variable", "type", "default", "meaning"), rows)


# -- metrics ----------------------------------------------------------------------------------


def metrics() -> str:
    from prometheus_client import Counter, Histogram, Info
    from prometheus_client.metrics import MetricWrapperBase

    from consumers.runtime import metrics as module

    rows = []
    for value in vars(module).values():
        if not isinstance(value, MetricWrapperBase):
            continue
        (family,) = value.describe()
        if isinstance(value, Info):
            (collected,) = value.collect()
            names = [code(collected.samples[0].name)]
            labels = list(collected.samples[0].labels)
        else:
            names = [code(family.name + ("_total" if isinstance(value, Counter) else ""))]
            if isinstance(value, Histogram):
                names.append("(`_bucket`, `_sum`, `_count`)")
            # prometheus_client keeps a metric's label names only in this attribute
            labels = list(value._labelnames)
        rows.append(
            (
                " ".join(names),
                family.type,
                ", ".join(code(label) for label in labels),
                family.documentation,
            )
        )
    return table(("metric", "type", "labels", "what"), rows)


# -- events -----------------------------------------------------------------------------------


def _kind(node: dict[str, Any], defs: dict[str, Any]) -> str:
    """A JSON Schema node, said in a few words."""
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        target = defs.get(name, {})
        return _kind(target, defs) if "enum" in target else name
    if "anyOf" in node or "oneOf" in node:
        choices = node.get("anyOf", node.get("oneOf", []))
        kinds = [_kind(n, defs) for n in choices if n.get("type") != "null"]
        return " or ".join(dict.fromkeys(kinds))
    if "const" in node:
        return code(json.dumps(node["const"]))
    if "enum" in node:
        return ", ".join(code(v) for v in node["enum"])
    kind = node.get("type", "any")
    if kind == "array":
        return f"list of {_kind(node.get('items', {}), defs)}"
    if kind == "object" and "properties" in node and "title" in node:
        return str(node["title"])
    if "format" in node:
        return f"{kind} ({node['format']})"
    return str(kind)


def _fields(
    schema: dict[str, Any], defs: dict[str, Any], kinds: dict[str, str] | None = None
) -> str:
    required = set(schema.get("required", []))
    kinds = kinds or {}
    return table(
        ("field", "type", "required", "description"),
        [
            (
                code(name),
                kinds.get(name) or _kind(node, defs),
                "yes" if name in required else "",
                node.get("description", ""),
            )
            for name, node in schema.get("properties", {}).items()
        ],
    )


def events() -> str:
    from consumers.operations.contracts.catalog import is_public, schema_id, topic_of, variants_of
    from consumers.operations.contracts.schemas import event_schema, examples_of
    from statemachine.events import EVENT_TYPES
    from statemachine.upcasting import CURRENT_VERSION

    first = next(iter(EVENT_TYPES))
    envelope = event_schema(first, variants_of(first)[0])
    envelope["properties"]["type"]["description"] = "The event's type (below)."
    envelope["properties"]["data"]["description"] = "What the event says: its type's data."
    sections = [
        "## The envelope",
        "Every event, as on the log (`data` is each type's own, below):",
        _fields(
            envelope,
            envelope.get("$defs", {}),
            {"type": "string: the type's name", "data": "object: the type's data"},
        ),
        "## The types",
        table(
            ("type", "visibility", "topic", "schema version"),
            [
                (
                    f"[`{name}`](#{name.lower()})",
                    "public" if is_public(name) else "internal",
                    f"`<prefix>.{topic_of(name)}.v1`",
                    str(CURRENT_VERSION[name]),
                )
                for name in EVENT_TYPES
            ],
        ),
    ]
    for name in EVENT_TYPES:
        variant = variants_of(name)[0]
        schema = event_schema(name, variant)
        defs = schema.get("$defs", {})
        data = schema["properties"]["data"]
        data_model = defs.get(data.get("$ref", "").rsplit("/", 1)[-1], data)
        ids = ", ".join(code(schema_id(name, v)) for v in variants_of(name))
        sections += [
            f"### `{name}` {{#{name.lower()}}}",
            schema["description"].split(" As sent through auditrec")[0],
            f"{'Public' if is_public(name) else 'Internal'}; on `<prefix>.{topic_of(name)}.v1`; "
            f"schema version {CURRENT_VERSION[name]}; `$id` {ids}.",
            _fields(data_model, defs) if data_model.get("properties") else "No data.",
        ]
        examples = examples_of(name, variant)
        if examples:
            sections.append("```json\n" + json.dumps(examples[0], indent=2) + "\n```")
    return "\n\n".join(sections)


REFERENCES: dict[str, Callable[[], str]] = {
    "cli": cli,
    "http": http,
    "configuration": configuration,
    "metrics": metrics,
    "events": events,
}
