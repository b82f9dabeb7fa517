"""msgspec structs generated from the pydantic event models, field by field.

Each model in :mod:`statemachine.events` gets a struct with the same fields, in the same order,
with every constraint msgspec can check natively (lengths, bounds, literals, enums, UUIDs,
aware datetimes, unknown fields forbidden). What msgspec cannot check the same way is
recorded for the reader (:mod:`consumers.eventlog.wire.readers`) or guarded before decoding:

- timestamps are msgspec's aware datetimes; the reader applies
  :func:`statemachine.values._sane_time`'s rules (UTC, 1900..9000), and a fraction of more than
  six digits (msgspec rounds it, pydantic truncates) is guarded on the record's bytes;
- text without NUL is checked on the record's bytes (``\\u0000``), and msgspec itself refuses
  lone surrogates, which is what :func:`statemachine.values._storable` adds to a plain string;
- a pattern of one character class (the audit id's) becomes lengths msgspec checks and a
  ``str.strip`` the reader does, rather than a regular expression per event;
- an optional field defaults to the model's default when it is a scalar (shared, as pydantic
  shares it); a nested model's default is ``UNSET``, which the reader replaces with the
  default as its struct, so that a default is never rebuilt per event.

Anything this translation does not know (a new validator, a pattern construct whose meaning
differs between pydantic's Rust regex and Python's ``re``, a default factory, an alias) raises
:class:`TypeError` at import, so a model cannot drift from its decoder silently.
"""

from __future__ import annotations

import enum
import inspect
import re
import sys
import types
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types as at
import msgspec
from pydantic import AfterValidator, AwareDatetime, BaseModel
from pydantic.fields import FieldInfo
from pydantic.types import AllowInfNan, StringConstraints
from pydantic_core import PydanticUndefined

from statemachine import values
from statemachine.upcasting import CURRENT_VERSION

__all__ = ["FieldSpec", "ModelSpec", "spec_for", "view_struct"]

_Time = Annotated[datetime, msgspec.Meta(tz=True)]
# ``^[chars]{m,n}$``: pydantic's regex engine matches ``$`` only at the very end, Python's
# also before a final newline; as lengths and a character set the two cannot differ.
_CHAR_CLASS = re.compile(r"\^\[((?:[A-Za-z0-9._:]|[A-Za-z0-9]-[A-Za-z0-9])+-?)\]\{(\d+),(\d+)\}\$")
_FLOAT_MAX = sys.float_info.max


@dataclass(frozen=True)
class FieldSpec:
    """One field as the reader handles it."""

    name: str
    required: bool
    default: Any
    time: bool = False
    """The value, unless None, is a timestamp string to parse."""
    filled: bool = True
    """The decoded value is the model's (a scalar default is msgspec's own); else a missing
    value is ``UNSET``, and the reader puts the model's default (as its struct) in its place."""
    nested: tuple[type[BaseModel], ...] = ()
    """The models a value may be (their structs are read in turn)."""
    in_union: bool = False
    """The field's type is a union, so a nested value must be told apart by its class."""
    charset: str | None = None
    """A string value must consist of these characters."""


@dataclass(frozen=True)
class ModelSpec:
    """A model's struct and the fields its reader goes through, in the model's order."""

    model: type[BaseModel]
    struct: type[msgspec.Struct]
    fields: tuple[FieldSpec, ...]
    tag: str | None
    wire: tuple[tuple[str, Any, Any], ...]
    """The struct's fields as ``msgspec.defstruct`` takes them."""


@dataclass
class _Found:
    time: bool = False
    nested: list[type[BaseModel]] = field(default_factory=list)
    union: bool = False
    container: int = 0
    charset: str | None = None


_SPECS: dict[type[BaseModel], ModelSpec] = {}


def spec_for(model: type[BaseModel], tag: str | None = None) -> ModelSpec:
    """The struct of ``model``; for an envelope, ``tag`` is its ``type``, required (pydantic's
    discriminator requires it) and its ``schema_version`` the current one."""
    known = _SPECS.get(model)
    if known is not None:
        if known.tag != tag:
            raise TypeError(f"{model.__name__} is decoded both with and without a tag")
        return known
    config = model.model_config
    if config.get("extra") != "forbid":
        raise TypeError(f"{model.__name__}: only models that forbid extra fields are compiled")
    specs: list[FieldSpec] = []
    struct_fields: list[tuple[str, Any, Any]] = []
    for name, info in model.model_fields.items():
        if info.alias is not None or info.validation_alias is not None:
            raise TypeError(f"{model.__name__}.{name}: aliases are not compiled")
        if info.default_factory is not None:
            raise TypeError(f"{model.__name__}.{name}: default factories are not compiled")
        found = _Found()
        kind = _translate(_annotation(info), found, f"{model.__name__}.{name}")
        if tag is not None and name == "schema_version":
            kind = Literal[CURRENT_VERSION[tag]]  # an older version is upcast by pydantic's path
        if found.container and (found.time or found.nested or found.charset):
            raise TypeError(f"{model.__name__}.{name}: models or checks inside a container")
        required = info.is_required() or (tag is not None and name == "type")
        if name == "type" and tag is not None and kind != Literal[tag]:
            raise TypeError(f"{model.__name__}.type is not Literal[{tag!r}]")
        filled = required or not isinstance(info.default, BaseModel)
        if required:
            struct_fields.append((name, kind, msgspec.NODEFAULT))
        elif filled:  # msgspec gives the default itself (an immutable scalar, shared)
            _immutable(info.default, f"{model.__name__}.{name}")
            struct_fields.append((name, kind, info.default))
        else:
            _immutable(info.default, f"{model.__name__}.{name}")
            struct_fields.append((name, kind | msgspec.UnsetType, msgspec.UNSET))
        specs.append(
            FieldSpec(
                name=name,
                required=required,
                default=None if required else info.default,
                filled=filled,
                time=found.time,
                nested=tuple(found.nested),
                in_union=found.union,
                charset=found.charset,
            )
        )
    struct = msgspec.defstruct(
        f"{model.__name__}Wire",
        struct_fields,
        kw_only=True,
        forbid_unknown_fields=True,
        gc=False,
    )
    spec = ModelSpec(
        model=model, struct=struct, fields=tuple(specs), tag=tag, wire=tuple(struct_fields)
    )
    _SPECS[model] = spec
    return spec


def _annotation(info: FieldInfo) -> Any:
    if info.metadata:
        return Annotated[(info.annotation, *info.metadata)]
    return info.annotation


def _immutable(default: Any, where: str) -> None:
    # The default is shared by every decoded instance, as pydantic shares it.
    if default is None or isinstance(default, str | int | float | enum.Enum):
        return
    if isinstance(default, BaseModel) and default.model_config.get("frozen"):
        return
    raise TypeError(f"{where}: default {default!r} is not immutable")


def _translate(tp: Any, found: _Found, where: str) -> Any:
    origin = get_origin(tp)
    if origin is Annotated:
        base, *meta = get_args(tp)
        return _annotated(base, meta, found, where)
    if origin in (Union, types.UnionType):
        found.union = True
        members = tuple(_translate(arg, found, where) for arg in get_args(tp))
        return Union[members]  # noqa: UP007 - built from a tuple
    if origin is Literal:
        if not all(
            isinstance(arg, str | int) and not isinstance(arg, bool) for arg in get_args(tp)
        ):
            raise TypeError(f"{where}: only str and int literals are compiled")
        return tp
    if origin is dict:
        key, value = get_args(tp)
        found.container += 1
        return dict[_translate(key, found, where), _translate(value, found, where)]  # type: ignore[misc]
    if tp in (type(None), str, int, float, bool, uuid.UUID):
        return tp
    if inspect.isclass(tp) and issubclass(tp, enum.Enum):
        if not all(isinstance(member.value, str) for member in tp):
            raise TypeError(f"{where}: only enums of strings are compiled")
        return tp
    if inspect.isclass(tp) and issubclass(tp, BaseModel):
        found.nested.append(tp)
        return spec_for(tp).struct
    raise TypeError(f"{where}: the compiled decoder cannot express {tp!r}")


def _annotated(base: Any, meta: list[Any], found: _Found, where: str) -> Any:
    constraints: dict[str, Any] = {}
    time = False
    for item in _flatten(meta, where):
        if isinstance(item, StringConstraints):
            unsupported = (item.strip_whitespace, item.to_upper, item.to_lower, item.strict)
            if any(flag is not None for flag in unsupported) or item.ascii_only is not None:
                raise TypeError(f"{where}: string transformations are not compiled")
            if item.min_length is not None:
                constraints["min_length"] = item.min_length
            if item.max_length is not None:
                constraints["max_length"] = item.max_length
            if item.pattern is not None:
                charset, low, high = _char_class(str(item.pattern), where)
                constraints.update(min_length=low, max_length=high)
                found.charset = charset
        elif isinstance(item, at.Ge | at.Le | at.Gt | at.Lt | at.MinLen | at.MaxLen):
            name = type(item).__name__.lower()
            name = {"minlen": "min_length", "maxlen": "max_length"}.get(name, name)
            constraints[name] = getattr(item, name)
        elif isinstance(item, AllowInfNan) and item.allow_inf_nan is False:
            constraints.update(ge=-_FLOAT_MAX, le=_FLOAT_MAX)  # finite floats only
        elif isinstance(item, AfterValidator) and item.func is values._storable:
            pass  # NUL is guarded on the bytes; msgspec refuses lone surrogates
        elif isinstance(item, AfterValidator) and item.func is values._sane_time:
            time = True
        else:
            raise TypeError(f"{where}: the compiled decoder does not know {item!r}")
    if base is AwareDatetime:
        if not time or constraints:
            raise TypeError(f"{where}: only Timestamp values are compiled")
        found.time = True
        return _Time
    if time:
        raise TypeError(f"{where}: _sane_time on {base!r}")
    inner = _translate(base, found, where)
    return Annotated[inner, msgspec.Meta(**constraints)] if constraints else inner


def _flatten(meta: list[Any], where: str) -> list[Any]:
    out: list[Any] = []
    for item in meta:
        if isinstance(item, FieldInfo):
            if item.discriminator is not None or item.default is not PydanticUndefined:
                raise TypeError(f"{where}: Field() options beyond constraints are not compiled")
            out.extend(_flatten(list(item.metadata), where))
        else:
            out.append(item)
    return out


def _char_class(pattern: str, where: str) -> tuple[str, int, int]:
    match = _CHAR_CLASS.fullmatch(pattern)
    if match is None:
        raise TypeError(f"{where}: pattern {pattern!r} is not one character class")
    spec, low, high = match.groups()
    chars = re.sub(r"(.)-(.)", lambda m: _span(m[1], m[2]), spec)
    return chars, int(low), int(high)


def _span(first: str, last: str) -> str:
    return "".join(chr(c) for c in range(ord(first), ord(last) + 1))


def view_struct(spec: ModelSpec) -> type[msgspec.Struct]:
    """The struct an envelope of ``spec`` is decoded into, one member of a union tagged by
    ``type``: its fields but ``type``, which is the class's tag, read like the model's field."""
    if spec.tag is None:
        raise TypeError(f"{spec.model.__name__} is not an envelope")
    return msgspec.defstruct(
        f"{spec.model.__name__}View",
        [(name, kind, default) for name, kind, default in spec.wire if name != "type"],
        kw_only=True,
        forbid_unknown_fields=True,
        gc=False,
        tag_field="type",
        tag=spec.tag,
        namespace={"type": spec.tag, "__module__": __name__},
    )
