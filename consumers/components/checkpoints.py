"""Checkpoints of a stateful consumer (the reconciler, telemetry): a partition's audit states
together with the offset they cover, kept in the projection store, so an assignment loads the
latest checkpoint and folds only what follows instead of the partition's whole history.

**Consistent by construction.** A checkpoint is the state exactly at a committed offset (the
decisions the commit appended included): taken (:meth:`Checkpoints.taken`) when the batch up
to that offset is handled, under the consumer's batch lock, and saved only once its commit
succeeded. A crash before it is saved only leaves an older checkpoint, from which more is
folded; nothing is lost or decided twice, because folding a consumer's own decision again
changes nothing (a terminal audit records, not applies, another failure; a hold stands until
it ends).

**Cheap.** States are immutable, so the snapshot is a shallow copy; encoding (pickle, zlib) runs
in a worker thread and the save in the background, at most one per partition at a time, after
``every_events`` records or ``every_seconds`` of a partition's progress.

**Safe to ignore.** A checkpoint of another format version, of other state fields, or that
cannot be read is ignored (logged): the partition is folded from the start of what the log
holds, as without checkpoints.

With the states go the event ids folded into each audit that can still change (a running
audit, a failure that may be overturned or restored: :mod:`consumers.components.keys`), each
restored as ``bytes`` of exactly its ids; a checkpoint saved before they were kept restores
none.
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from consumers.components.keys import Keys
from consumers.eventlog.port import TopicPartition
from projections.checkpoints import CheckpointStore
from statemachine.events import EVENT_ADAPTER, AuditFailureHeld
from statemachine.state import AuditState

__all__ = [
    "Checkpoints",
    "Restored",
    "Snapshot",
    "decode_checkpoint",
    "decode_states",
    "encode_states",
]

FORMAT = 2
_FIELDS = AuditState._fields

log = structlog.get_logger("auditrec.checkpoints")

# A partition's states, held decisions and keys, copied when a checkpoint of them is due.
Snapshot = tuple[dict[str, AuditState], dict[str, AuditFailureHeld], dict[str, bytes]]


@dataclass
class Restored:
    next_offset: int
    states: dict[str, AuditState]
    holds: dict[str, AuditFailureHeld]
    keys: Keys = field(default_factory=dict)


def encode_states(
    states: Mapping[str, AuditState],
    holds: Mapping[str, AuditFailureHeld] | None = None,
    keys: Mapping[str, bytes | bytearray] | None = None,
) -> bytes:
    rows = []
    terminal = []  # compacted terminal audits (no audit id of their own): status and who
    for key, state in states.items():
        if state.audit_id == "":
            terminal.append((key, state.status, state.failed_by))
        else:
            rows.append((key, tuple(getattr(state, name) for name in _FIELDS)))
    held = [h.model_dump_json() for h in (holds or {}).values()]
    # each audit's event ids as they are kept: one bytes of 16 per id
    ids = {a: bytes(b) for a, b in (keys or {}).items()}
    return zlib.compress(pickle.dumps((FORMAT, _FIELDS, rows, terminal, held, ids), protocol=5), 1)


def decode_states(blob: bytes) -> tuple[dict[str, AuditState], dict[str, AuditFailureHeld]]:
    """The states and holds in ``blob`` (see :func:`decode_checkpoint`)."""
    states, holds, _ = decode_checkpoint(blob)
    return states, holds


def decode_checkpoint(
    blob: bytes,
) -> tuple[dict[str, AuditState], dict[str, AuditFailureHeld], Keys]:
    """The states, holds and keys in ``blob`` (no keys from a checkpoint saved before they
    were kept); ``ValueError`` when it is not a checkpoint this version can read."""
    try:
        version, names, rows, terminal, held, *rest = pickle.loads(zlib.decompress(blob))
    except Exception as exc:
        raise ValueError(f"unreadable checkpoint: {type(exc).__name__}") from None
    if version != FORMAT or tuple(names) != _FIELDS:
        raise ValueError(f"checkpoint of another format ({version}, {len(names)} fields)")
    states = {key: AuditState(*values) for key, values in rows}
    shared: dict[tuple[str, str | None], AuditState] = {}
    for key, status, failed_by in terminal:
        state = shared.get((status, failed_by))
        if state is None:
            state = shared[(status, failed_by)] = AuditState("", status=status, failed_by=failed_by)
        states[key] = state
    holds: dict[str, AuditFailureHeld] = {}
    for text in held:
        event = EVENT_ADAPTER.validate_json(text)
        if isinstance(event, AuditFailureHeld):
            holds[event.audit_id] = event
    keys: Keys = {}
    for audit_id, ids in (rest[0] if rest else {}).items():
        keys[audit_id] = bytes(ids)  # exact; a bytearray again when the audit folds more
    return states, holds, keys


class Checkpoints:
    def __init__(
        self,
        store: CheckpointStore,
        consumer: str,
        *,
        every_events: int = 50_000,
        every_seconds: float = 60.0,
    ) -> None:
        self.store = store
        self.consumer = consumer
        self.every_events = every_events
        self.every_seconds = every_seconds
        self._progress: dict[TopicPartition, int] = {}
        self._saved_at: dict[TopicPartition, float] = {}
        self._saving: dict[TopicPartition, asyncio.Task[None]] = {}
        self.saved = 0

    async def load(self, tp: TopicPartition, committed: int) -> Restored | None:
        """The latest checkpoint of ``tp`` at or before ``committed`` (a checkpoint past the
        committed offset — offsets reset by hand — is not this group's state: ignored)."""
        try:
            found = await self.store.load_checkpoint(self.consumer, tp[0], tp[1])
        except Exception as exc:
            if getattr(exc, "retriable", False):
                raise
            log.warning("checkpoint not loaded", partition=tp[1], error=str(exc)[:200])
            return None
        self._saved_at[tp] = time.monotonic()
        self._progress[tp] = 0
        if found is None:
            return None
        next_offset, blob = found
        if next_offset > committed:
            log.warning(
                "checkpoint ahead of the committed offset: ignored",
                partition=tp[1],
                checkpoint=next_offset,
                committed=committed,
            )
            return None
        try:
            states, holds, keys = await asyncio.to_thread(decode_checkpoint, blob)
        except ValueError as exc:
            log.warning("checkpoint ignored", partition=tp[1], reason=str(exc))
            return None
        return Restored(next_offset, states, holds, keys)

    def progressed(
        self,
        tp: TopicPartition,
        records: int,
        next_offset: int,
        states: Mapping[str, AuditState],
        holds: Mapping[str, AuditFailureHeld] | None = None,
        keys: Keys | None = None,
    ) -> None:
        """After a commit of ``tp`` up to ``next_offset``, with ``states`` (and ``keys``)
        exactly as of that offset: save a checkpoint in the background when one is due."""
        snapshot = self.taken(tp, records, states, holds, keys)
        if snapshot is not None:
            self.save(tp, next_offset, snapshot)

    def taken(
        self,
        tp: TopicPartition,
        records: int,
        states: Mapping[str, AuditState],
        holds: Mapping[str, AuditFailureHeld] | None = None,
        keys: Keys | None = None,
    ) -> Snapshot | None:
        """Count ``records`` more of ``tp``'s progress; when a checkpoint is due, a snapshot of
        ``states`` (and ``holds``, ``keys``) as they are now, to :meth:`save` once they are
        committed."""
        self._progress[tp] = self._progress.get(tp, 0) + records
        due = self._progress[tp] >= self.every_events or (
            self._progress[tp] > 0
            and time.monotonic() - self._saved_at.get(tp, 0.0) >= self.every_seconds
        )
        running = self._saving.get(tp)
        if not due or (running is not None and not running.done()):
            return None
        self._progress[tp] = 0
        self._saved_at[tp] = time.monotonic()
        # states are immutable: a shallow copy; each audit's keys are copied
        return dict(states), dict(holds or {}), {a: bytes(b) for a, b in (keys or {}).items()}

    def save(self, tp: TopicPartition, next_offset: int, snapshot: Snapshot) -> None:
        """Save ``snapshot``, the states of ``tp`` up to ``next_offset`` (committed), in the
        background."""
        self._saving[tp] = asyncio.create_task(self._save(tp, next_offset, *snapshot))

    async def _save(
        self,
        tp: TopicPartition,
        next_offset: int,
        states: dict[str, AuditState],
        holds: dict[str, AuditFailureHeld],
        keys: dict[str, bytes],
    ) -> None:
        try:
            blob = await asyncio.to_thread(encode_states, states, holds, keys)
            await self.store.save_checkpoint(self.consumer, tp[0], tp[1], next_offset, blob)
            self.saved += 1
            log.debug("checkpoint saved", partition=tp[1], offset=next_offset, bytes=len(blob))
        except Exception as exc:  # the next one is due soon; restarting folds a little more
            log.warning("checkpoint not saved", partition=tp[1], error=str(exc)[:200])

    def forget(self, tp: TopicPartition) -> None:
        self._progress.pop(tp, None)
        self._saved_at.pop(tp, None)

    async def flush(self) -> None:
        """Wait for the saves in flight (on stop)."""
        tasks = [t for t in self._saving.values() if not t.done()]
        self._saving.clear()
        with contextlib.suppress(Exception):
            await asyncio.gather(*tasks, return_exceptions=True)

    @staticmethod
    def describe(restored: Restored | None) -> dict[str, Any]:
        if restored is None:
            return {"checkpoint": None}
        return {"checkpoint": restored.next_offset}
