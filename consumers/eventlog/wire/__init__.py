"""The compiled decoder of lifecycle events: msgspec parses and checks a record, and the
pydantic instances are built from what it decoded without validating again.

:func:`decode_fast` returns exactly what ``EVENT_ADAPTER.validate_json`` returns for a
current-version event, or None whenever it is not certain it would: an older
``schema_version``, anything msgspec refuses, a fraction of a second of more than six digits,
a ``\\u0000`` escape. It never refuses on its own; :mod:`consumers.eventlog.codec` then takes
pydantic's path, so every error message stays pydantic's. ``tests/consumers/test_wire.py``
holds the two paths to the same results.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgspec

from consumers.eventlog.wire.build import Builder, builder_for
from consumers.eventlog.wire.structs import envelope_struct, spec_for
from statemachine.events import LIFECYCLE_TYPES, AuditEvent

__all__ = ["STRUCTS", "decode_fast"]

# One struct for every envelope, its data left raw; the builder of the type it names decodes
# the data with that type's struct and checks the version is the current one.
_SPECS = [spec_for(model, tag) for tag, model in LIFECYCLE_TYPES.items()]
STRUCTS: tuple[type[msgspec.Struct], ...] = tuple(spec.struct for spec in _SPECS)
_decode: Callable[[bytes], Any] = msgspec.json.Decoder(envelope_struct(_SPECS)).decode
_BUILD: dict[str, Builder] = {
    tag: builder_for(model, tag) for tag, model in LIFECYCLE_TYPES.items()
}
_GIVE_UP = (msgspec.MsgspecError, ValueError, OverflowError, RecursionError)
# A fraction of more than six digits: msgspec rounds it, pydantic truncates it.
_LONG_FRACTION = re.compile(rb"\.[0-9]{7}")


def decode_fast(value: bytes, strict: bool = False) -> AuditEvent | None:
    """The event in ``value``, or None when pydantic's path must decide.

    A fault of the fast path itself (a bug) gives None too, so a record is never refused, nor a
    consumer stopped, by the decoder that only exists to be faster; tests pass ``strict`` to
    see it raise.
    """
    # One-byte searches first: most records have no escape and no fraction at all.
    if b"\\" in value and b"\\u0000" in value:
        return None  # NUL: pydantic refuses it in every string
    if b"." in value and _LONG_FRACTION.search(value) is not None:
        return None
    try:
        wire = _decode(value)
        return _BUILD[wire.type](wire)  # type: ignore[return-value]
    except _GIVE_UP:
        return None
    except Exception:
        if strict:
            raise
        return None
