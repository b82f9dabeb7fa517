"""Rebuilding the projection from the log: empty it, then project every event again.

Unlike the projector, a rebuild reads each partition directly (no consumer group to join)
and in large chunks, and overlaps reading the log with writing the store. Events of one
audit share a partition, so a chunk coalesces each audit's events into one row write. The
projector's stored offsets end where the rebuild read, so ``serve`` continues from there.

**Over a trimmed log** (lifecycle retention, :mod:`consumers.components.retention`), the events
the log no longer holds are taken from the projection's own history: what ``audit_events``
recorded before each partition's start is set aside (``keep_history``), the projection is
emptied, that history is projected again in its order, then the log from where it starts. The
rows come out as the current projection code makes them from the whole history, as without
trimming. What it cannot do then: bring back an event the projection never recorded (one that
went to the dead-letter topic as invalid, or history lost with the database). The set-aside
history outlives an interrupted rebuild and is dropped when one finishes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from consumers.components.projector import Projector
from consumers.eventlog.codec import dead_letter, read_verbatim
from consumers.eventlog.port import OutRecord
from consumers.operations.backends import Backends
from projections.values import Position
from statemachine.errors import DecodeError, InvalidInput, NoServer
from statemachine.events import AuditEvent

__all__ = ["CHUNK", "rebuild_projection"]

CHUNK = 20_000
_YIELD_EVERY = 256  # records decoded between two chances for the store's write to proceed

_Chunk = tuple[
    list[tuple[AuditEvent, Position]],  # events
    list[bytes | None],  # their JSON as read, when current (stored as is)
    dict[tuple[str, int], int],  # next offsets
    list[OutRecord],  # dead letters
]


async def rebuild_projection(rt: Backends, *, progress: bool = False) -> int:
    """Returns the number of events applied. Refuses while a projector runs elsewhere."""
    live = await rt.live_components()
    if "projector" in live:
        raise NoServer(
            "a projector is running (" + ", ".join(live["projector"]) + "): stop `auditrec serve` "
            "before rebuilding"
        )
    group = rt.topics.group(Projector.name)
    topic = rt.topics.lifecycle
    starts = await rt.log.start_offsets(topic)
    kept = await _set_aside(rt, group, {(topic, p): s for p, s in starts.items() if s > 0})
    ends = await rt.log.end_offsets(topic)
    total = kept + sum(end - starts.get(p, 0) for p, end in ends.items())
    queue: asyncio.Queue[_Chunk | None] = asyncio.Queue(maxsize=2)

    async def read() -> None:
        try:
            await fill()
        except asyncio.CancelledError:
            raise  # the rebuild stopped: nobody takes from the queue any more
        except BaseException:
            await queue.put(None)  # the loop below ends, and awaiting this raises
            raise
        await queue.put(None)

    async def fill() -> None:
        if kept:
            async for item in _kept_chunks(rt):
                await queue.put(item)
        for partition, end in sorted(ends.items()):
            chunk: list[tuple[AuditEvent, Position]] = []
            bodies: list[bytes | None] = []
            dlq: list[OutRecord] = []
            last = -1
            async for batch in rt.log.read(topic, partition, starts.get(partition, 0), end):
                for n, record in enumerate(batch, 1):
                    if not n % _YIELD_EVERY:  # the store's write of the chunk before
                        await asyncio.sleep(0)  # proceeds while this one is decoded
                    last = record.offset
                    try:
                        event, body = read_verbatim(record.value)
                    except DecodeError as exc:
                        dlq.append(dead_letter(rt.topics, record, "auditrec-rebuild", str(exc)))
                        continue
                    chunk.append((event, (topic, partition, record.offset)))
                    bodies.append(body)
                if len(chunk) >= CHUNK:
                    await queue.put((chunk, bodies, {(topic, partition): last + 1}, dlq))
                    chunk, bodies, dlq = [], [], []
            if chunk or dlq or last >= 0:
                offsets = {(topic, partition): max(last + 1, 0)}
                await queue.put((chunk, bodies, offsets, dlq))

    bar = Progress(
        TextColumn("rebuilding"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} events"),
        TimeRemainingColumn(),
        disable=not progress,
    )
    applied = 0
    with bar:
        task = bar.add_task("rebuild", total=total)
        # Emptying the projection takes a while (TRUNCATE): the log is read and decoded
        # meanwhile. The set-aside history is read from the store, so only after it.
        resetting = asyncio.ensure_future(rt.store.reset(group))
        reader: asyncio.Task[None] | None = None
        try:
            if kept:
                await resetting
            reader = asyncio.create_task(read())
            await resetting
            while (item := await queue.get()) is not None:
                events, bodies, offsets, dlq = item
                if dlq:
                    await rt.log.append(dlq)
                result = await rt.store.apply(events, offsets, group, bodies)
                applied += result.applied
                bar.update(task, advance=len(events) + len(dlq))
            await reader
        finally:
            running = [t for t in (reader, resetting) if t is not None]
            for t in running:  # whatever failed, the others stop too (done: no-op)
                t.cancel()
            await asyncio.gather(*running, return_exceptions=True)
    if kept:
        await rt.store.drop_kept_history()
    return applied


async def _set_aside(rt: Backends, group: str, trimmed: dict[tuple[str, int], int]) -> int:
    """Set aside the history a trimmed log no longer holds; refuse when the projection does
    not hold it either (nothing could rebuild those audits)."""
    if not trimmed:
        return 0
    stored = await rt.store.stored_offsets(group)
    kept = await rt.store.keep_history(trimmed)
    short = {tp: at for tp, at in trimmed.items() if stored.get(tp, 0) < at}
    if short and not kept:
        (t, p), at = next(iter(short.items()))
        raise InvalidInput(
            f"the log starts at offset {at} of {t}/{p} but the projection recorded history "
            f"only up to {stored.get((t, p), 0)}: the events in between are nowhere to "
            "rebuild from"
        )
    return kept


async def _kept_chunks(rt: Backends) -> AsyncIterator[_Chunk]:
    """The set-aside history as chunks to project (no offsets: the log's part sets them)."""
    after = 0
    while page := await rt.store.kept_history(after, CHUNK):
        events: list[tuple[AuditEvent, Position]] = []
        bodies: list[bytes | None] = []
        for n, body, position in page:
            after = n
            event, verbatim = read_verbatim(body)  # recorded valid: it decodes
            events.append((event, position))
            bodies.append(verbatim)
        yield events, bodies, {}, []
