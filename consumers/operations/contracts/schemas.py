"""The JSON Schemas (draft 2020-12) of the event types, generated from the models, for other
services to validate and generate code with (``auditrec schema --out DIR``).

Layout of ``DIR``::

    DIR/public/{Type}.json    public types as on the log: what a Kafka producer must write
    DIR/publish/{Type}.json   public types as sent through auditrec (POST /events, publish,
                              the ingest topic): event_id, occurred_at, schema_version,
                              producer optional; an AuditFailed only with failed_by workflow
    DIR/internal/{Type}.json  types only auditrec writes (ProbeRequested, decisions, holds,
                              observations), as on the log
    DIR/index.json            every type: its schema_version, topic, visibility and files

Each schema is self-contained (its nested models under ``$defs``), with ``$id``
``https://auditrec.dev/schemas/v{schema_version}/{variant}/{Type}.json`` (see
:func:`~consumers.operations.contracts.catalog.schema_id`), a description and an example on
every field, and whole example events under ``examples``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Final

from consumers.operations.contracts.catalog import (
    OMITTABLE,
    PUBLISHED_FAILED_BY,
    Variant,
    internal_types,
    is_public,
    schema_id,
    topic_of,
    variants_of,
)
from consumers.operations.contracts.examples import EXAMPLES, PUBLISH_EXAMPLES
from statemachine.admission import RECONCILER_FIELDS
from statemachine.events import EVENT_TYPES
from statemachine.upcasting import CURRENT_VERSION

__all__ = [
    "DRAFT",
    "envelope_schema",
    "event_schema",
    "examples_of",
    "schema_files",
    "write_schemas",
]

DRAFT: Final = "https://json-schema.org/draft/2020-12/schema"
_DEFS: Final = "#/$defs/{model}"


def _def_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _annotate(node: dict[str, Any], value: Any, defs: dict[str, Any]) -> None:
    """Give each property of ``node`` (and of the models it refers to) ``value``'s value for
    it as its example, unless it has one."""
    if "$ref" in node:
        target = defs.get(_def_name(node["$ref"]))
        if target is not None:
            _annotate(target, value, defs)
        return
    for branch in node.get("anyOf", ()):
        if "$ref" in branch and isinstance(value, dict):
            _annotate(branch, value, defs)
    properties = node.get("properties")
    if not isinstance(properties, dict) or not isinstance(value, dict):
        return
    for name, prop in properties.items():
        if name in value:
            prop.setdefault("examples", [value[name]])
            _annotate(prop, value[name], defs)


def _tidy(node: Any) -> None:
    """Descriptions as one paragraph each (docstrings wrap at the source's line length)."""
    if isinstance(node, dict):
        if isinstance(node.get("description"), str):
            node["description"] = " ".join(node["description"].split())
        for key, value in node.items():
            if key != "examples":
                _tidy(value)
    elif isinstance(node, list):
        for item in node:
            _tidy(item)


def envelope_schema(name: str, ref_template: str = _DEFS) -> tuple[dict[str, Any], dict[str, Any]]:
    """The schema of ``name``'s envelope as the log holds it, and its nested models (refs
    built with ``ref_template``): ``type`` required, every field described and exemplified."""
    cls = EVENT_TYPES[name]
    body = cls.model_json_schema(ref_template=ref_template)
    defs: dict[str, Any] = body.pop("$defs", {})
    body["required"] = ["type", *[f for f in body.get("required", []) if f != "type"]]
    properties = body["properties"]
    properties["type"]["description"] = f"The event type; `{name}` for this schema."
    data = properties["data"]
    data_model = defs.get(_def_name(data.get("$ref", "")), {})
    data.setdefault(
        "description",
        data_model.get("description", f"What the `{name}` event says."),
    )
    example = EXAMPLES.get(name)
    if example is not None:
        _annotate(body, example, defs)
    if "description" not in body:
        body["description"] = f"The `{name}` event."
    _tidy(body)
    _tidy(defs)
    return body, defs


def examples_of(name: str, variant: Variant) -> list[dict[str, Any]]:
    """Whole example events for ``name`` in ``variant`` (when publishing, the least first)."""
    if variant == "publish":
        return list(PUBLISH_EXAMPLES.get(name, ()))
    return [EXAMPLES[name]] if name in EXAMPLES else []


def event_schema(name: str, variant: Variant) -> dict[str, Any]:
    """The self-contained JSON Schema of ``name`` in ``variant`` (see the module's
    docstring)."""
    if variant not in variants_of(name):
        raise ValueError(f"{name} has no {variant!r} schema (it has {variants_of(name)})")
    body, defs = envelope_schema(name)
    body = copy.deepcopy(body)
    description = body.pop("description")
    if variant == "publish":
        defs = _referenced(body, _as_published(defs))
        body["required"] = [f for f in body["required"] if f not in OMITTABLE]
        description += (
            " As sent through auditrec (POST /events, auditrec publish): "
            + ", ".join(f"`{f}`" for f in OMITTABLE)
            + " may be omitted and are filled in."
        )
    return {
        "$schema": DRAFT,
        "$id": schema_id(name, variant),
        "title": name,
        "description": description,
        **{k: v for k, v in body.items() if k != "title"},
        **({"$defs": defs} if defs else {}),
        "examples": examples_of(name, variant),
    }


def _as_published(defs: dict[str, Any]) -> dict[str, Any]:
    """``defs`` as a publisher may send them (:mod:`statemachine.admission`): a failure only
    ever the workflow's own, without a reconciler decision's fields (and the definitions only
    those used)."""
    defs = copy.deepcopy(defs)
    failed = defs.get("AuditFailedData", {}).get("properties", {})
    for field in RECONCILER_FIELDS:
        failed.pop(field, None)
    if "failed_by" in failed:
        failed["failed_by"] = {
            "type": "string",
            "enum": list(PUBLISHED_FAILED_BY),
            "description": (
                "Who decided the failure: a publisher reports only the workflow's own "
                "(`reconciler` and `operator` failures are auditrec's to write)."
            ),
            "examples": list(PUBLISHED_FAILED_BY),
        }
        defs.pop("FailedBy", None)
    return defs


def _referenced(body: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """``defs`` without those nothing refers to any longer (from ``body`` or another kept
    definition)."""
    kept = dict(defs)
    while True:
        text = json.dumps(body) + json.dumps(kept)
        unused = [name for name in kept if f'"#/$defs/{name}"' not in text]
        if not unused:
            return kept
        for name in unused:
            del kept[name]


def schema_files() -> dict[str, dict[str, Any]]:
    """Every schema file by its path under the output folder, ``index.json`` included."""
    files: dict[str, dict[str, Any]] = {}
    index: dict[str, Any] = {}
    for name in EVENT_TYPES:
        paths = {}
        for variant in variants_of(name):
            path = f"{variant}/{name}.json"
            files[path] = event_schema(name, variant)
            paths[variant] = {"file": path, "$id": schema_id(name, variant)}
        index[name] = {
            "schema_version": CURRENT_VERSION[name],
            "visibility": "public" if is_public(name) else "internal",
            "topic": topic_of(name),
            "schemas": paths,
        }
    files["index.json"] = {
        "description": "auditrec's event types and their JSON Schemas (auditrec schema --out).",
        "public": [n for n in EVENT_TYPES if is_public(n)],
        "internal": list(internal_types()),
        "types": index,
    }
    return files


def write_schemas(out_dir: Path) -> list[Path]:
    """Write :func:`schema_files` under ``out_dir``; a type's files are replaced whole."""
    written = []
    for relative, body in schema_files().items():
        path = out_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(body, indent=2, ensure_ascii=False) + "\n")
        written.append(path)
    return written
