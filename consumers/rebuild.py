"""Rebuilding the projection from the log: empty it, then project every event again."""

from __future__ import annotations

import time

from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from projections.errors import NoServer

from .projector import Projector
from .runner import Runtime

__all__ = ["rebuild_projection"]


async def rebuild_projection(rt: Runtime, *, progress: bool = False) -> int:
    """Returns the number of events applied. Refuses while a projector runs elsewhere."""
    live = await rt.live_components()
    if "projector" in live:
        raise NoServer(
            "a projector is running (" + ", ".join(live["projector"]) + "): stop `auditrec serve` "
            "before rebuilding"
        )
    projector = Projector(rt.log, rt.store)
    await rt.store.reset(projector.group)
    ends = await rt.log.end_offsets(rt.topics.lifecycle)
    total = sum(ends.values())
    done = 0
    bar = Progress(
        TextColumn("rebuilding"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} events"),
        TimeRemainingColumn(),
        disable=not progress,
    )
    with bar:
        task = bar.add_task("rebuild", total=total)
        async with projector:
            projector.poll_timeout = 0.05
            quiet_since = time.monotonic()
            while True:
                handled = await projector.step()
                done += handled
                bar.update(task, completed=min(done, total))
                if handled:
                    quiet_since = time.monotonic()
                elif await projector.idle() or time.monotonic() - quiet_since > 30:
                    break
    return projector.applied
