"""Schema versions and upcasting: each event type's current ``schema_version``, the upcasters
that bring an older envelope one version up, and :func:`upcast`, which the decoders apply to a
raw envelope before validation, so the models in :mod:`statemachine.events` always describe
the current version.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from statemachine.errors import InvalidInput
from statemachine.events import EVENT_TYPES

__all__ = ["CURRENT_VERSION", "UPCASTERS", "Upcaster", "upcast"]

CURRENT_VERSION: dict[str, int] = {
    name: cls.model_fields["schema_version"].default for name, cls in EVENT_TYPES.items()
}

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]

# Version 1 reconciler decisions did not name their rule; the observed status tells it.
_RULE_OF_STATUS: Final[Mapping[str, str]] = {
    "errored": "errored",
    "terminated": "terminated",
    "not_found": "instance_lost",
    "not_attached": "never_attached",
    "complete": "finalize_lost",
}


def _failure_v1_to_v2(raw: dict[str, Any]) -> dict[str, Any]:
    data = raw.get("data")
    if isinstance(data, dict) and data.get("failed_by") == "reconciler" and "rule" not in data:
        rule = _RULE_OF_STATUS.get(str(data.get("workflow_status")))
        if rule is not None:
            data = {**data, "rule": rule}
    return {**raw, "data": data, "schema_version": 2}


def _started_v1_to_v2(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 2 adds the optional ``workflow``: a version 1 start runs in the default one."""
    return {**raw, "schema_version": 2}


# (type, from_version) -> function returning the envelope at from_version + 1.
UPCASTERS: Mapping[tuple[str, int], Upcaster] = {
    ("AuditFailed", 1): _failure_v1_to_v2,
    ("AuditFailureSimulated", 1): _failure_v1_to_v2,
    ("AuditStarted", 1): _started_v1_to_v2,
}


def upcast(raw: dict[str, Any]) -> dict[str, Any]:
    """Bring a decoded envelope of an older ``schema_version`` up to the current one.

    Raises :class:`InvalidInput` for a version newer than this code knows, or one with no path
    up.
    """
    kind = raw.get("type")
    version = raw.get("schema_version", 1)
    if not isinstance(kind, str) or kind not in CURRENT_VERSION or not isinstance(version, int):
        return raw  # validation names the problem
    current = CURRENT_VERSION[kind]
    if version > current:
        raise InvalidInput(
            f"schema_version {version} of {kind} is newer than supported ({current})"
        )
    while version < current:
        step = UPCASTERS.get((kind, version))
        if step is None:
            raise InvalidInput(f"no upcaster for {kind} schema_version {version}")
        raw = step(raw)
        version = raw["schema_version"]
    return raw
