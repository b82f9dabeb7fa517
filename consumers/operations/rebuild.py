"""Rebuilding the projection from the log: empty it, then project every event again.

Unlike the projector, a rebuild reads each partition directly (no consumer group to join)
and in large chunks, and overlaps reading the log with writing the store. Events of one
audit share a partition, so a chunk coalesces each audit's events into one row write. The
projector's stored offsets end where the rebuild read, so ``serve`` continues from there.
"""

from __future__ import annotations

import asyncio

from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from consumers.components.projector import Projector
from consumers.eventlog.codec import dead_letter, decode_verbatim
from consumers.eventlog.port import OutRecord
from consumers.operations.backends import Backends
from projections.store import Position
from statemachine.errors import DecodeError, NoServer
from statemachine.events import AuditEvent

__all__ = ["CHUNK", "rebuild_projection"]

CHUNK = 20_000

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
    await rt.store.reset(group)
    ends = await rt.log.end_offsets(topic)
    total = sum(ends.values())
    queue: asyncio.Queue[_Chunk | None] = asyncio.Queue(maxsize=2)

    async def read() -> None:
        try:
            for partition, end in sorted(ends.items()):
                chunk: list[tuple[AuditEvent, Position]] = []
                bodies: list[bytes | None] = []
                dlq: list[OutRecord] = []
                last = -1
                async for batch in rt.log.read(topic, partition, 0, end):
                    for record in batch:
                        last = record.offset
                        try:
                            event, body = decode_verbatim(record.value)
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
        finally:
            await queue.put(None)

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
        reader = asyncio.create_task(read())
        try:
            while (item := await queue.get()) is not None:
                events, bodies, offsets, dlq = item
                if dlq:
                    await rt.log.append(dlq)
                result = await rt.store.apply(events, offsets, group, bodies)
                applied += result.applied
                bar.update(task, advance=len(events) + len(dlq))
            await reader
        finally:
            reader.cancel()
    return applied
