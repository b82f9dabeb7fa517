"""The idempotency key ``(audit_id, event_id)`` (:mod:`statemachine.idempotency`) as the log's
stateful consumers, the reconciler and telemetry, judge it while they fold.

Each keeps, per partition, the event ids folded into each audit that is not terminal
(:data:`Keys`). An event whose key is among them is passed over, a duplicate and a conflict
alike: the first content seen wins, as in the projection, which dead-letters the conflict
(``event_id_conflict``); passed over, a duplicate is folded once. Content is not compared here:
whatever comes again under a folded key changes nothing.

Only running audits are kept (memory grows with running audits, as the states do): each
audit's ids are one ``bytearray`` of 16 bytes an id (about 60 bytes an audit and 16 an id,
where a set of ints costs 216 and 75), searched with ``find``. Once an audit ends its ids
are forgotten, so an event that comes again after its audit ended (or before it started) is
folded like any other (a terminal audit changes only for an overturn or a restore); a
restored audit judges the keys folded since.

The keys are checkpointed with the states (:mod:`consumers.components.checkpoints`); a
checkpoint saved before they were knows none, and the audits it restores judge only the keys
folded after it.
"""

from __future__ import annotations

from statemachine.events import AuditEvent

__all__ = ["Keys", "first_seen", "holds", "settled"]

Keys = dict[str, bytearray]
"""A partition's folded event ids by audit, for audits not terminal: each audit's ids one
after the other, 16 bytes each (``UUID.bytes``)."""


def holds(ids: bytes | bytearray, event_id: bytes) -> bool:
    """Whether ``ids`` (16 bytes an id) holds ``event_id`` (a match across two ids is not)."""
    at = ids.find(event_id)
    while at >= 0:
        if at % 16 == 0:
            return True
        at = ids.find(event_id, at + 1)
    return False


def first_seen(keys: Keys, event: AuditEvent) -> bool:
    """Whether ``event``'s key is new to ``keys`` (it is then remembered)."""
    event_id = event.event_id.bytes
    ids = keys.get(event.audit_id)
    if ids is None:
        keys[event.audit_id] = bytearray(event_id)
        return True
    if holds(ids, event_id):
        return False
    ids += event_id
    return True


def settled(keys: Keys, audit_id: str, running: bool) -> None:
    """After an event of ``audit_id`` is folded: forget its keys once it is not ``running``
    (terminal, or never started)."""
    if not running:
        keys.pop(audit_id, None)
