"""The idempotency key ``(audit_id, event_id)`` (:mod:`statemachine.idempotency`) as the log's
stateful consumers, the reconciler and telemetry, judge it while they fold.

Each keeps, per partition, the event ids folded into each audit that is not terminal
(:data:`Keys`). An event whose key is among them is passed over, a duplicate and a conflict
alike: the first content seen wins, as in the projection, which dead-letters the conflict
(``event_id_conflict``); passed over, a duplicate is folded once. Content is not compared here:
whatever comes again under a folded key changes nothing.

The keys of every audit that can still change are kept: a running audit's, and a terminal
audit's while the transition table (:func:`statemachine.machine.still_changes`) still leaves
its state, as a failure the reconciler or an operator made may be overturned or restored. So
a conflict that comes after such a failure (an ``AuditCompleted`` under the id of an event
folded before it) is passed over here as the projection dead-letters it, not folded as an
overturn. Only an audit whose state is final forgets its keys (a completed audit, one the
workflow reported failed): no event changes it any more, so an event that comes again then
(or before its audit started) is folded like any other and changes nothing.

Memory grows with running audits and the failed audits that can still change: a running
audit's ids are one ``bytearray`` of 16 bytes an id (about 60 bytes an audit and 16 an id,
where a set of ints costs 216 and 75), searched with ``find``; once it is terminal they are
one ``bytes`` of exactly its ids (33 bytes and 16 an id, nothing over-allocated), made a
``bytearray`` again only if it runs again.

The keys are checkpointed with the states (:mod:`consumers.components.checkpoints`); a
checkpoint saved before they were knows none, and the audits it restores judge only the keys
folded after it.
"""

from __future__ import annotations

from statemachine.events import AuditEvent
from statemachine.machine import RUNNING, still_changes
from statemachine.state import AuditState

__all__ = ["Keys", "first_seen", "holds", "settled"]

Keys = dict[str, bytearray | bytes]
"""A partition's folded event ids by audit, for audits that can still change: each audit's ids
one after the other, 16 bytes each (``UUID.bytes``); ``bytes`` once the audit is terminal."""

# Whether an audit keeps its keys, by (status, failed_by): the table's conditions read only
# ``failed_by`` (:class:`statemachine.machine.Facts`).
_KEPT: dict[tuple[str, str | None], bool] = {}


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
    if ids.find(event_id) >= 0 and holds(ids, event_id):  # most ids are new: one find
        return False
    if type(ids) is bytes:  # a terminal audit's, or restored from a checkpoint
        keys[event.audit_id] = ids = bytearray(ids)
    ids += event_id
    return True


def kept(state: AuditState | None) -> bool:
    """Whether an audit in ``state`` (``None``: never started) keeps its keys: it runs, or the
    transition table still leaves its terminal state."""
    if state is None:
        return False
    status = state.status
    if status == RUNNING:
        return True
    at = (status, state.failed_by)
    keep = _KEPT.get(at)
    if keep is None:
        keep = _KEPT[at] = state.exists and still_changes(status, state)
    return keep


def settled(keys: Keys, audit_id: str, state: AuditState | None) -> None:
    """After an event of ``audit_id`` is folded into ``state`` (``None``: never started): forget
    its keys once the audit is final (:func:`kept`); a terminal audit's are kept as ``bytes``."""
    if state is not None and state.status == RUNNING:
        return
    if not kept(state):
        keys.pop(audit_id, None)
        return
    ids = keys.get(audit_id)
    if type(ids) is bytearray:
        keys[audit_id] = bytes(ids)
