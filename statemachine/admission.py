"""Which events may enter the log from outside auditrec: the one rule every door applies.

Other services report what their audits do: :data:`PUBLIC_TYPES`, and ``AuditFailed`` only as
the workflow's own failure (``failed_by = "workflow"``). Everything else — observations, probe
requests, decisions (a reconciler's or an operator's failure), holds, releases, discards and
restorations — is auditrec's to write: its components and its operator actions make those
events themselves and append them directly, never through a door.

The doors are ``POST /events`` (every token scope), CloudEvents, a dead-letter replay with a
corrected body, ``auditrec publish``, the ingest topic that Kafka publishers write, and the
clients (their generated vocabulary holds the same facts). Each calls :func:`refusal` on the
raw envelope (before or after validation: it reads only ``type``, ``producer`` and a few
fields of ``data``) with who authenticated at that door.

A published ``AuditFailed`` carries none of a reconciler decision's fields
(:data:`RECONCILER_FIELDS`: the rule, what asked for the probe, the status and the policy it
rests on), names none of auditrec's own producers (:data:`AUDITREC_PRODUCERS`), and names no
actor but who authenticated: over HTTP the token (``token:<name>``, or ``anonymous``), on the
CLI ``cli:<os user>``; the ingest topic authenticates no one, so an event from it names none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from statemachine.events import EVENT_TYPES

__all__ = [
    "AUDITREC_PRODUCERS",
    "PUBLIC_TYPES",
    "PUBLISHED_FAILED_BY",
    "RECONCILER_FIELDS",
    "refusal",
]

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
# The fields of an `AuditFailed` that only a reconciler decision carries.
RECONCILER_FIELDS: Final = ("rule", "reconciled_by", "workflow_status", "policy")
# The producers auditrec's components and operator actions write as (no publisher is one).
AUDITREC_PRODUCERS: Final = (
    "auditrec-reconciler",
    "auditrec-watchdog",
    "auditrec-probe",
    "auditrec-brake",
    "auditrec-ingest",
    "auditrec-operator",
    "auditrec-subscriber",
)


def refusal(envelope: Mapping[str, Any], actor: str | None) -> str | None:
    """Why ``envelope`` (an event as JSON: a dict with ``type`` and ``data``) may not enter
    from outside auditrec through a door where ``actor`` authenticated (``None`` where no one
    does: the ingest topic), or ``None`` when it may. The reason names the field and says
    where such events come from."""
    kind = envelope.get("type")
    if not isinstance(kind, str):
        return None  # not an event at all, or an unknown type: validation names what is wrong
    if kind not in PUBLIC_TYPES and kind in EVENT_TYPES:
        return (
            f"type: {kind} is written by auditrec only (its components and operator actions); "
            f"publishers send {', '.join(PUBLIC_TYPES)}"
        )
    producer = envelope.get("producer")
    if isinstance(producer, str) and producer in AUDITREC_PRODUCERS:
        return (
            f"producer: {producer!r} is one of auditrec's own components; name your service "
            "(or leave producer out: it is then who sent the event)"
        )
    data = envelope.get("data")
    if not isinstance(data, Mapping):
        return None  # validation names what is wrong
    failed_by = data.get("failed_by")
    if kind == "AuditFailed" and failed_by is not None and failed_by not in PUBLISHED_FAILED_BY:
        return (
            f"data.failed_by: AuditFailed with failed_by {failed_by!r} is written by auditrec "
            "only (an operator fails an audit with `auditrec fail` or POST /audits/{id}/fail); "
            "publishers send failures with failed_by 'workflow'"
        )
    if kind == "AuditFailed":
        for field in RECONCILER_FIELDS:
            if data.get(field) is not None:
                return (
                    f"data.{field}: only auditrec's reconciler decisions carry it; a "
                    "workflow's own failure names error_code, error_detail and failed_phase"
                )
    claimed = data.get("actor")
    if claimed is not None and claimed != actor:
        if actor is None:
            return (
                f"data.actor: {claimed!r} is not who wrote the record; an event from the "
                "ingest topic names no actor (no one authenticates there)"
            )
        return (
            f"data.actor: {claimed!r} is not who authenticated ({actor!r}); the actor is the "
            "token's (or the CLI user's), never the body's (name a person you act for in "
            "on_behalf_of)"
        )
    return None
