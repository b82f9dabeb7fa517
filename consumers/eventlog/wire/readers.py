"""Readers: a decoded struct made to read as the pydantic instance validation would make.

msgspec leaves three things for afterwards, which a reader does in place on the struct:
an optional field the JSON left out holds ``UNSET`` when its default is a model, and gets that
default as its struct (a scalar default is msgspec's own); a timestamp
gets :func:`statemachine.values._sane_time`'s treatment (in UTC, within its years); a string of
one character class (the audit id) is checked for characters outside it. A value the model
would refuse, or read otherwise, raises :class:`Doubt`, and the record is left to pydantic.

Each model gets a straight-line function generated from its :class:`ModelSpec` (as
``dataclasses`` generates ``__init__``), rather than a loop over its fields.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import msgspec
from pydantic import BaseModel

from consumers.eventlog.wire.structs import ModelSpec, spec_for
from statemachine import values

__all__ = ["Doubt", "Reader", "reader_for"]

Reader = Callable[[Any], Any]

# statemachine.values keeps timestamps from its earliest (included) to its latest (excluded)
# in UTC; both are the first instant of a year, so in UTC the bounds are years.
_FIRST_YEAR, _END_YEAR = values._EARLIEST.year, values._LATEST.year
_WHOLE_YEARS = (
    datetime(_FIRST_YEAR, 1, 1, tzinfo=UTC),
    datetime(_END_YEAR, 1, 1, tzinfo=UTC),
)
if _WHOLE_YEARS != (values._EARLIEST, values._LATEST):
    raise TypeError("the timestamp bounds are no longer whole years: compare datetimes")


class Doubt(ValueError):
    """A value pydantic might refuse, or read otherwise: the record is left to pydantic."""


def reader_for(model: type[BaseModel], tag: str | None = None) -> Reader:
    """The reader of ``model``'s struct (an envelope's when ``tag`` is its type), nested
    models' structs read inline; it returns the struct it was given."""
    spec = spec_for(model, tag)
    scope: dict[str, Any] = {
        "UNSET": msgspec.UNSET,
        "Doubt": Doubt,
        "UTC": UTC,
        "FIRST_YEAR": _FIRST_YEAR,
        "END_YEAR": _END_YEAR,
    }
    body: list[str] = []
    _emit(spec, "s", scope, body)
    source = "def read(s):\n" + "".join(f"    {line}\n" for line in [*body, "return s"])
    exec(compile(source, f"<wire reader of {model.__name__}>", "exec"), scope)
    read: Reader = scope["read"]
    read.__doc__ = f"A {model.__name__}'s struct, read as the instance would be.\n\n{source}"
    return read


def as_struct(value: Any) -> Any:
    """A model's default as its struct would read (a nested model's default is a model)."""
    if not isinstance(value, BaseModel):
        return value
    spec = spec_for(type(value))
    return spec.struct(**{f.name: as_struct(getattr(value, f.name)) for f in spec.fields})


def _emit(spec: ModelSpec, source: str, scope: dict[str, Any], body: list[str]) -> None:
    """Append the statements reading the struct in ``source`` as ``spec.model``: a field is
    written back only when its value changes (most events need no write at all)."""
    n = len(scope)  # a prefix no other model in this reader has: it takes a name at once
    scope[f"M{n}"] = spec.model
    for i, f in enumerate(spec.fields):
        var, target = f"v{n}_{i}", f"{source}.{f.name}"
        steps: list[tuple[str, list[str]]] = []  # (condition, statements), as if/elif
        if not f.filled:
            scope[f"D{n}_{i}"] = as_struct(f.default)
            steps.append((f"{var} is UNSET", [f"{target} = D{n}_{i}"]))
        if f.time:
            steps.append((f"{var} is not None", _sane_time(var, target)))
        for nested in f.nested:
            inner: list[str] = []
            _emit(spec_for(nested), var, scope, inner)
            struct = f"S{len(scope)}"
            scope[struct] = spec_for(nested).struct
            if inner:  # else, as decoded, it already reads as the model would
                steps.append((f"{var}.__class__ is {struct}", inner))
        if f.charset is not None:
            scope[f"C{n}_{i}"] = f.charset
            check = [f"if {var}.strip(C{n}_{i}):", f"    raise Doubt({f.name!r})"]
            steps.append((f"{var}.__class__ is str", check))
        if not steps:
            continue
        body.append(f"{var} = {target}")
        if f.required and not f.in_union and len(steps) == 1:  # one kind of value: no test
            body.extend(steps[0][1])
        else:
            for k, (condition, statements) in enumerate(steps):
                body.append(f"{'elif' if k else 'if'} {condition}:")
                body.extend(f"    {line}" for line in statements or ["pass"])


def _sane_time(var: str, target: str) -> list[str]:
    """:func:`statemachine.values._sane_time`, inlined."""
    return [
        f"if {var}.tzinfo is not UTC:",
        f"    {var} = {var}.astimezone(UTC)",
        f"    {target} = {var}",
        f"if not FIRST_YEAR <= {var}.year < END_YEAR:",
        "    raise Doubt('timestamp out of range')",
    ]
