"""Builders: a decoded struct into the pydantic instance validation would have produced.

An instance is made the way pydantic's own validator makes one, without validating again:
``object.__new__`` and the four slots a model has (``__dict__`` in field order,
``__pydantic_fields_set__`` naming exactly the fields the JSON set, ``__pydantic_extra__`` and
``__pydantic_private__`` both None, as for a model that forbids extras and has no private
attributes). So ``==``, ``model_dump()``, ``model_dump_json()`` and ``model_fields_set`` are
those of a validated instance.

Each model gets a straight-line function generated from its :class:`ModelSpec` (as
``dataclasses`` generates ``__init__``): a per-field loop would cost more than the decoding.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import msgspec
from pydantic import BaseModel

from consumers.eventlog.wire.structs import ModelSpec, spec_for
from statemachine import values

__all__ = ["Builder", "Doubt", "builder_for"]

Builder = Callable[[Any], BaseModel]

# statemachine.values keeps timestamps from its earliest (included) to its latest (excluded)
# in UTC; both are the first instant of a year, so in UTC the bounds are years, cheaper to compare.
_FIRST_YEAR, _END_YEAR = values._EARLIEST.year, values._LATEST.year
_WHOLE_YEARS = (
    datetime(_FIRST_YEAR, 1, 1, tzinfo=UTC),
    datetime(_END_YEAR, 1, 1, tzinfo=UTC),
)
if _WHOLE_YEARS != (values._EARLIEST, values._LATEST):
    raise TypeError("the timestamp bounds are no longer whole years: compare datetimes")


class Doubt(ValueError):
    """A value pydantic might refuse, or read otherwise: the fast path gives up on the record."""


def builder_for(model: type[BaseModel], tag: str | None = None) -> Builder:
    """The builder of ``model``'s struct, its nested models' built inline."""
    spec = spec_for(model, tag)
    scope: dict[str, Any] = {
        "UNSET": msgspec.UNSET,
        "new": object.__new__,
        "setattr": object.__setattr__,
        "Doubt": Doubt,
        "UTC": UTC,
        "FIRST_YEAR": _FIRST_YEAR,
        "END_YEAR": _END_YEAR,
    }
    body: list[str] = []
    if tag is not None:  # the envelope struct: check the version, decode the raw data
        scope["VERSION"] = spec.model.model_fields["schema_version"].default
        scope["DECODE_DATA"] = msgspec.json.Decoder(_data_struct(spec)).decode
    result = _emit(spec, "s", scope, body, envelope=tag is not None)
    source = "def build(s):\n" + "".join(f"    {line}\n" for line in [*body, f"return {result}"])
    exec(compile(source, f"<wire builder of {model.__name__}>", "exec"), scope)
    build: Builder = scope["build"]
    build.__doc__ = f"A {model.__name__} from its struct.\n\n{source}"
    return build


def _data_struct(spec: ModelSpec) -> type[msgspec.Struct]:
    (nested,) = next(f.nested for f in spec.fields if f.name == "data")
    return spec_for(nested).struct


def _emit(
    spec: ModelSpec, source: str, scope: dict[str, Any], body: list[str], envelope: bool = False
) -> str:
    """Append the statements building ``spec.model`` from the struct in ``source``; the name
    of the variable holding the instance."""
    n = len(scope)  # a prefix no other model in this builder has
    model, fields_set = f"M{n}", f"fs{n}"
    scope[model] = spec.model
    scope[f"ALL{n}"] = frozenset(f.name for f in spec.fields)
    body.append(f"{fields_set} = set(ALL{n})")
    items: list[str] = []
    for i, f in enumerate(spec.fields):
        var = f"v{n}_{i}"
        body.append(f"{var} = {source}.{f.name}")
        steps: list[tuple[str, list[str]]] = []  # (condition, statements), as if/elif
        if not f.required:
            scope[f"D{n}_{i}"] = f.default
            steps.append(
                (f"{var} is UNSET", [f"{var} = D{n}_{i}", f"{fields_set}.discard({f.name!r})"])
            )
        if envelope and f.name == "schema_version":
            steps.append((f"{var} != VERSION", ["raise Doubt('schema_version')"]))
        if f.time:
            steps.append((f"{var} is not None", _sane_time(var)))
        for nested in f.nested:
            raw = envelope and f.name == "data"  # msgspec.Raw, decoded by the type's struct
            if raw and f.required:  # optional in the envelope struct, for AuditCompleted's sake
                steps.append((f"{var} is UNSET", ["raise Doubt('data')"]))
            inner = [f"{var} = DECODE_DATA({var})"] if raw else []
            built = _emit(spec_for(nested), var, scope, inner)
            struct = f"S{len(scope)}"
            scope[struct] = spec_for(nested).struct
            test = "True" if raw else f"{var}.__class__ is {struct}"
            steps.append((test, [*inner, f"{var} = {built}"]))
        if f.charset is not None:
            scope[f"C{n}_{i}"] = f.charset
            check = [f"if {var}.strip(C{n}_{i}):", f"    raise Doubt({f.name!r})"]
            steps.append((f"{var}.__class__ is str", check))
        if f.required and not f.in_union and len(steps) == 1:  # one kind of value: no test
            body.extend(steps[0][1])
        else:
            for k, (condition, statements) in enumerate(steps):
                body.append(f"{'elif' if k else 'if'} {condition}:")
                body.extend(f"    {line}" for line in statements)
        items.append(f"{f.name!r}: {var}")
    obj = f"obj{n}"
    body += [
        f"{obj} = new({model})",
        f"setattr({obj}, '__dict__', {{{', '.join(items)}}})",
        f"setattr({obj}, '__pydantic_fields_set__', {fields_set})",
        f"setattr({obj}, '__pydantic_extra__', None)",
        f"setattr({obj}, '__pydantic_private__', None)",
    ]
    return obj


def _sane_time(var: str) -> list[str]:
    """:func:`statemachine.values._sane_time`, inlined (a call costs more than its body)."""
    return [
        f"if {var}.tzinfo is not UTC:",
        f"    {var} = {var}.astimezone(UTC)",
        f"if not FIRST_YEAR <= {var}.year < END_YEAR:",
        "    raise Doubt('timestamp out of range')",
    ]
