"""The idempotency key ``(audit_id, event_id)`` (:mod:`statemachine.idempotency`) as the log's
stateful consumers, the reconciler and telemetry, judge it while they fold.

Each keeps, per partition, the event ids folded into each audit that is not terminal
(:data:`Keys`). An event whose key is among them is passed over, a duplicate and a conflict
alike: the first content seen wins, as in the projection, which dead-letters the conflict
(``event_id_conflict``); passed over, a duplicate is folded once. Content is not compared here:
whatever comes again under a folded key changes nothing.

Only running audits are kept (memory grows with running audits, as the states do: about 75
bytes an event id): once an audit ends its ids are forgotten, so an event that comes again
after its audit ended (or before it started) is folded like any other (a terminal audit
changes only for an overturn or a restore); a restored audit judges the keys folded since.

The keys are checkpointed with the states (:mod:`consumers.components.checkpoints`); a
checkpoint saved before they were knows none, and the audits it restores judge only the keys
folded after it.
"""

from __future__ import annotations

from statemachine.events import AuditEvent

__all__ = ["Keys", "first_seen", "settled"]

Keys = dict[str, set[int]]
"""A partition's folded event ids (as integers) by audit, for audits not terminal."""


def first_seen(keys: Keys, event: AuditEvent) -> bool:
    """Whether ``event``'s key is new to ``keys`` (it is then remembered)."""
    ids = keys.get(event.audit_id)
    if ids is None:
        ids = keys[event.audit_id] = set()
    n = event.event_id.int
    if n in ids:
        return False
    ids.add(n)
    return True


def settled(keys: Keys, audit_id: str, running: bool) -> None:
    """After an event of ``audit_id`` is folded: forget its keys once it is not ``running``
    (terminal, or never started)."""
    if not running:
        keys.pop(audit_id, None)
