"""The compiled decoder of lifecycle events: msgspec parses and checks a record, and the
pydantic instances are built from what it decoded without validating again.

:func:`decode_fast` returns exactly what ``EVENT_ADAPTER.validate_json`` returns for a
current-version event, or None whenever it is not certain it would: an older
``schema_version``, anything msgspec refuses, a timestamp of another shape, a ``\\u0000``
escape. It never refuses on its own; :mod:`consumers.eventlog.codec` then takes pydantic's
path, so every error message stays pydantic's. ``tests/eventlog/test_wire.py`` holds the two
paths to the same results.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgspec

from consumers.eventlog.wire.build import Builder, builder_for
from consumers.eventlog.wire.structs import spec_for
from statemachine.events import LIFECYCLE_TYPES, AuditEvent

__all__ = ["STRUCTS", "decode_fast"]

# One decoder and builder per lifecycle event type, picked by the ``type`` the record names:
# finding it in the bytes costs far less than msgspec's look-ahead for a tag that is not the
# first key. The struct's own ``type`` is the one literal, so a wrong pick fails to decode.
_BY_TYPE: dict[bytes, tuple[Callable[[bytes], Any], Builder]] = {
    tag.encode(): (msgspec.json.Decoder(spec_for(model, tag).struct).decode, builder_for(model, tag))
    for tag, model in LIFECYCLE_TYPES.items()
}
STRUCTS: tuple[type[msgspec.Struct], ...] = tuple(
    spec_for(model, tag).struct for tag, model in LIFECYCLE_TYPES.items()
)
_GIVE_UP = (msgspec.MsgspecError, ValueError, OverflowError, RecursionError)
# A fraction of more than six digits: msgspec rounds it, pydantic truncates it.
_LONG_FRACTION = re.compile(rb"\.[0-9]{7}")


def decode_fast(value: bytes) -> AuditEvent | None:
    """The event in ``value``, or None when pydantic's path must decide."""
    start = value.find(b'"type":"') + 8
    if start == 7:
        start = value.find(b'"type": "') + 9
        if start == 8:
            return None
    picked = _BY_TYPE.get(value[start : value.find(b'"', start)])
    if picked is None or b"\\u0000" in value or _LONG_FRACTION.search(value) is not None:
        return None  # NUL: pydantic refuses it in every string
    decode, build = picked
    try:
        return build(decode(value))  # type: ignore[return-value]
    except _GIVE_UP:
        return None
