"""Which events may enter the log from outside auditrec: the one rule every door applies.

Other services report what their audits do: :data:`PUBLIC_TYPES`, and ``AuditFailed`` only as
the workflow's own failure (``failed_by = "workflow"``). Everything else — observations, probe
requests, decisions (a reconciler's or an operator's failure), holds, releases, discards and
restorations — is auditrec's to write: its components and its operator actions make those
events themselves and append them directly, never through a door.

The doors are ``POST /events`` (every token scope), CloudEvents, a dead-letter replay with a
corrected body, ``auditrec publish``, the ingest topic that Kafka publishers write, and the
clients (their generated vocabulary holds the same facts). Each calls :func:`refusal` on the
raw envelope (before or after validation: it reads only ``type`` and ``data.failed_by``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from statemachine.events import EVENT_TYPES

__all__ = ["PUBLIC_TYPES", "PUBLISHED_FAILED_BY", "refusal"]

# Published by other services (DESIGN §1: AuditStarted / Progressed / Completed / Failed).
PUBLIC_TYPES: Final = (
    "AuditStarted",
    "WorkflowInstanceAttached",
    "AuditProgressed",
    "AuditCompleted",
    "AuditFailed",
)
# The only `failed_by` of an `AuditFailed` from outside: the workflow's own failure.
PUBLISHED_FAILED_BY: Final = ("workflow",)


def refusal(envelope: Mapping[str, Any]) -> str | None:
    """Why ``envelope`` (an event as JSON: a dict with ``type`` and ``data``) may not enter
    from outside auditrec, or ``None`` when it may. The reason names the type (and the
    ``failed_by``) and says where such events come from."""
    kind = envelope.get("type")
    if not isinstance(kind, str):
        return None  # not an event at all, or an unknown type: validation names what is wrong
    if kind not in PUBLIC_TYPES and kind in EVENT_TYPES:
        return (
            f"type: {kind} is written by auditrec only (its components and operator actions); "
            f"publishers send {', '.join(PUBLIC_TYPES)}"
        )
    data = envelope.get("data")
    failed_by = data.get("failed_by") if isinstance(data, Mapping) else None
    if kind == "AuditFailed" and failed_by is not None and failed_by not in PUBLISHED_FAILED_BY:
        return (
            f"data.failed_by: AuditFailed with failed_by {failed_by!r} is written by auditrec "
            "only (an operator fails an audit with `auditrec fail` or POST /audits/{id}/fail); "
            "publishers send failures with failed_by 'workflow'"
        )
    return None
