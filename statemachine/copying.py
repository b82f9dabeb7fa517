"""Copies of frozen slots dataclasses with some fields changed, made fast.

Folding events makes one new state per event, so the copy is the hottest allocation of every
consumer that folds. ``dataclasses.replace`` goes through ``__init__``, and a frozen
dataclass's ``__init__`` stores each field through ``object.__setattr__``; setting each slot
through its descriptor is 2x faster, what :func:`replacer` generates 3.5x faster still, and a
copy that changes fields named in advance another 2x.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, is_dataclass
from typing import Any, TypeVar

__all__ = ["replacer"]

T = TypeVar("T")

_KEEP = object()
_drafts: dict[type, type] = {}


def _draft(cls: type) -> type:
    """A plain class with the slots of ``cls`` (so the same memory layout)."""
    draft = _drafts.get(cls)
    if draft is None:
        if not is_dataclass(cls):
            raise TypeError(f"{cls.__name__} is not a dataclass")
        names = tuple(f.name for f in fields(cls))
        if names != getattr(cls, "__slots__", None):
            raise TypeError(f"{cls.__name__}'s slots are not its fields, in order: use slots=True")
        draft = _drafts[cls] = type(f"_{cls.__name__}Draft", (), {"__slots__": names})
    return draft


def replacer(cls: type[T], *changed: str) -> Callable[..., T]:
    """``dataclasses.replace`` for ``cls`` (a frozen dataclass with ``slots=True``), generated
    from its fields as ``dataclasses`` generates ``__init__``, without calling it. Given field
    names, a copy that changes exactly those: each is a required keyword argument, and the
    other fields are copied without a test.

    The copy is filled as an instance of a plain class with the very same slots: its slot
    stores are ordinary attribute stores, which the interpreter specialises, where the frozen
    class routes every store through its refusing ``__setattr__``. Once filled, the copy
    becomes a ``cls`` (``__class__`` assignment, which Python allows between classes of one
    layout). An unknown field is a ``TypeError``, as with ``dataclasses.replace``; so is a
    class whose slots are not its fields (no copy of a ``__dict__``)."""
    draft = _draft(cls)
    names: tuple[str, ...] = draft.__slots__  # type: ignore[attr-defined]
    unknown = set(changed) - set(names)
    if unknown:
        raise TypeError(f"{cls.__name__} has no fields {sorted(unknown)}")
    if changed:
        signature = f"state, /, *, {', '.join(changed)}"
        stores = [f"    new.{n} = {n if n in changed else f'state.{n}'}" for n in names]
    else:
        signature = f"state, /, *, {', '.join(f'{n}=_KEEP' for n in names)}"
        stores = [f"    new.{n} = state.{n} if {n} is _KEEP else {n}" for n in names]
    source = "\n".join(
        [
            f"def replace({signature}):",
            "    new = _new(_Draft)",
            *stores,
            "    new.__class__ = _Class",
            "    return new",
        ]
    )
    namespace: dict[str, Any] = {
        "_KEEP": _KEEP,
        "_new": object.__new__,
        "_Draft": draft,
        "_Class": cls,
    }
    exec(source, namespace)  # the source is built from the field names alone
    replace: Callable[..., T] = namespace["replace"]
    replace.__doc__ = f"A copy of ``state`` with {', '.join(changed) or 'changes'} applied."
    replace.__qualname__ = f"replacer({cls.__name__}{''.join(f', {n!r}' for n in changed)})"
    return replace
