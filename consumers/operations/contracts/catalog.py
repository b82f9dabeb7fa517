"""Which event types other services publish and which only auditrec writes, where each type
travels, and the versioned ids of their schemas: the facts every published contract (JSON
Schemas, AsyncAPI, CloudEvents) derives from the models.

A type is *public* when other services publish it (``POST /events``, ``auditrec publish``, or
the ingest topic); every other type is *internal*: auditrec's own components and
operator commands write it, and readers of the log may see it. A type added to
:data:`~statemachine.events.EVENT_TYPES` is internal until it is listed in
:data:`~statemachine.admission.PUBLIC_TYPES`, where the rule every door applies lives (an
``AuditFailed`` from outside is only ever the workflow's).
"""

from __future__ import annotations

from typing import Final, Literal

from statemachine.admission import PUBLIC_TYPES, PUBLISHED_FAILED_BY
from statemachine.events import EVENT_TYPES, LIFECYCLE_TYPES
from statemachine.upcasting import CURRENT_VERSION

__all__ = [
    "OMITTABLE",
    "PUBLIC_TYPES",
    "PUBLISHED_FAILED_BY",
    "SCHEMA_BASE",
    "Variant",
    "internal_types",
    "is_public",
    "schema_id",
    "topic_of",
    "variants_of",
]


# Envelope fields a publisher through auditrec may leave out: auditrec fills them in.
OMITTABLE: Final = ("event_id", "occurred_at", "schema_version", "producer")

SCHEMA_BASE: Final = "https://auditrec.dev/schemas"

# public: a public type as it is on the log (and as a Kafka producer must write it);
# publish: a public type as sent through auditrec (OMITTABLE optional);
# internal: a type only auditrec writes, as it is on the log.
Variant = Literal["public", "publish", "internal"]


def is_public(name: str) -> bool:
    return name in PUBLIC_TYPES


def internal_types() -> tuple[str, ...]:
    """Every type auditrec alone writes, in the models' order (new types included)."""
    return tuple(name for name in EVENT_TYPES if name not in PUBLIC_TYPES)


def variants_of(name: str) -> tuple[Variant, ...]:
    return ("public", "publish") if is_public(name) else ("internal",)


def topic_of(name: str) -> Literal["lifecycle", "probe-requests"]:
    """The topic (its role, without the prefix) ``name`` travels on."""
    return "lifecycle" if name in LIFECYCLE_TYPES else "probe-requests"


def schema_id(name: str, variant: Variant) -> str:
    """The schema's ``$id``: ``{SCHEMA_BASE}/v{schema_version}/{variant}/{Type}.json``. The
    version is the type's own ``schema_version``, so a new version of one type gets a new id
    and the old one stays meaningful."""
    return f"{SCHEMA_BASE}/v{CURRENT_VERSION[name]}/{variant}/{name}.json"
