"""Rebuilding the projection from the log: empty it, then project every event again.

Unlike the projector, a rebuild reads each partition directly (no consumer group to join)
and in large chunks, and overlaps reading the log with writing the store. Events of one
audit share a partition, so a chunk coalesces each audit's events into one row write, and
chunks of different partitions are written at once, each in its own transaction. The
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
from collections.abc import AsyncIterator, Callable

import structlog
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from consumers.components.projector import Projector
from consumers.eventlog.codec import dead_letter, read_verbatim
from consumers.eventlog.port import OutRecord
from consumers.operations.backends import Backends
from projections.values import ApplyResult, Position
from statemachine.errors import DecodeError, InvalidInput, NoServer
from statemachine.events import AuditEvent

__all__ = ["CHUNK", "rebuild_projection"]

log = structlog.get_logger("auditrec.rebuild")

CHUNK = 20_000
WRITERS = 2  # chunks of different partitions written at once (bench/pipeline.py: rebuild)
_YIELD_EVERY = 256  # records decoded between two chances for the store's write to proceed

_Chunk = tuple[
    list[tuple[AuditEvent, Position]],  # events
    list[bytes | None],  # their JSON as read, when current (stored as is)
    dict[tuple[str, int], int],  # next offsets
    list[OutRecord],  # dead letters
]


async def rebuild_projection(backends: Backends, *, progress: bool = False) -> int:
    """Returns the number of events applied. Refuses while a projector runs elsewhere."""
    live = await backends.live_components()
    if "projector" in live:
        raise NoServer(
            "a projector is running (" + ", ".join(live["projector"]) + "): stop `auditrec serve` "
            "before rebuilding"
        )
    group = backends.topics.group(Projector.name)
    topic = backends.topics.lifecycle
    starts = await backends.log.inspection.start_offsets(topic)
    kept = await _set_aside(backends, group, {(topic, p): s for p, s in starts.items() if s > 0})
    ends = await backends.log.inspection.end_offsets(topic)
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
            async for item in _kept_chunks(backends):
                await queue.put(item)
        for partition, end in sorted(ends.items()):
            chunk: list[tuple[AuditEvent, Position]] = []
            bodies: list[bytes | None] = []
            dlq: list[OutRecord] = []
            last = -1
            async for batch in backends.log.inspection.read(
                topic, partition, starts.get(partition, 0), end
            ):
                for n, record in enumerate(batch, 1):
                    if not n % _YIELD_EVERY:  # the store's write of the chunk before
                        await asyncio.sleep(0)  # proceeds while this one is decoded
                    last = record.offset
                    try:
                        event, body = read_verbatim(record.value)
                    except DecodeError as exc:
                        dlq.append(
                            dead_letter(backends.topics, record, "auditrec-rebuild", str(exc))
                        )
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
    with bar:
        task = bar.add_task("rebuild", total=total)
        writes = _Writes(backends, group, lambda n: bar.update(task, advance=n))
        # Emptying the projection takes a while (TRUNCATE): the log is read and decoded
        # meanwhile. The set-aside history is read from the store, so only after it.
        resetting = asyncio.ensure_future(backends.store.writer.reset(group))
        reader: asyncio.Task[None] | None = None
        try:
            if kept:
                await resetting
            reader = asyncio.create_task(read())
            await resetting
            while (item := await queue.get()) is not None:
                events, bodies, offsets, dlq = item
                if dlq:  # before the store's offsets move past them
                    await backends.log.append(dlq)
                await writes.add(events, bodies, offsets, len(dlq))
            await writes.drain()
            await reader
        finally:
            running = [t for t in (reader, resetting, *writes.tasks()) if t is not None]
            for t in running:  # whatever failed, the others stop too (done: no-op)
                t.cancel()
            # A reader can miss its cancellation (seen on Kafka: it read on to the end) and
            # would then wait forever to put into the queue nobody takes from: take what it
            # puts until it ends.
            while reader is not None and not reader.done():
                while not queue.empty():
                    queue.get_nowait()
                await asyncio.wait([reader], timeout=0.05)
            await asyncio.gather(*running, return_exceptions=True)
    if kept:
        await backends.store.kept.drop_kept_history()
    if writes.conflicts:  # each was dead-lettered when it was first projected
        log.info("event id conflicts passed over, as when projected", count=writes.conflicts)
    return writes.applied


class _Writes:
    """Chunks written to the store at once, each in its own transaction: at most
    :data:`WRITERS`, and never two over the same partition (an audit lives in one partition,
    so they share no row, and each partition's chunks are written in order). A chunk without
    offsets (the set-aside history, of any partition) is written alone."""

    def __init__(self, backends: Backends, group: str, done: Callable[[int], object]) -> None:
        self.backends, self.group, self.done = backends, group, done
        self.applied = 0
        self.conflicts = 0  # events whose (audit_id, event_id) named other content first
        # each write's partitions, its task, and how many records it stands for
        self._pending: list[tuple[frozenset[tuple[str, int]], asyncio.Task[ApplyResult], int]] = []

    async def add(
        self,
        events: list[tuple[AuditEvent, Position]],
        bodies: list[bytes | None],
        offsets: dict[tuple[str, int], int],
        dead: int,
    ) -> None:
        keys = frozenset(offsets)
        while self._pending and (
            len(self._pending) >= WRITERS
            or not keys
            or any(not other or other & keys for other, _, _ in self._pending)
        ):
            await self._oldest()
        write = asyncio.create_task(
            self.backends.store.writer.apply(events, offsets, self.group, bodies)
        )
        self._pending.append((keys, write, len(events) + dead))

    async def drain(self) -> None:
        while self._pending:
            await self._oldest()

    def tasks(self) -> list[asyncio.Task[ApplyResult]]:
        return [write for _, write, _ in self._pending]

    async def _oldest(self) -> None:
        _, write, records = self._pending[0]
        result = await write  # a failure propagates; the caller cancels the rest
        del self._pending[0]
        self.applied += result.applied
        self.conflicts += len(result.conflicts)
        self.done(records)


async def _set_aside(backends: Backends, group: str, trimmed: dict[tuple[str, int], int]) -> int:
    """Set aside the history a trimmed log no longer holds; refuse when the projection does
    not hold it either (nothing could rebuild those audits)."""
    if not trimmed:
        return 0
    stored = await backends.store.writer.stored_offsets(group)
    kept = await backends.store.kept.keep_history(trimmed)
    short = {tp: at for tp, at in trimmed.items() if stored.get(tp, 0) < at}
    if short and not kept:
        (t, p), at = next(iter(short.items()))
        raise InvalidInput(
            f"the log starts at offset {at} of {t}/{p} but the projection recorded history "
            f"only up to {stored.get((t, p), 0)}: the events in between are nowhere to "
            "rebuild from"
        )
    return kept


async def _kept_chunks(backends: Backends) -> AsyncIterator[_Chunk]:
    """The set-aside history as chunks to project (no offsets: the log's part sets them)."""
    after = 0
    while page := await backends.store.kept.kept_history(after, CHUNK):
        events: list[tuple[AuditEvent, Position]] = []
        bodies: list[bytes | None] = []
        for n, body, position in page:
            after = n
            event, verbatim = read_verbatim(body)  # recorded valid: it decodes
            events.append((event, position))
            bodies.append(verbatim)
        yield events, bodies, {}, []
