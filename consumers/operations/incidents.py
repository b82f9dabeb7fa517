"""What needs an operator now, for the banner on every console page: the mass-failure brake
engaged (its held decisions, since when), a component failing or stalled, a pipeline component
no process runs, probing that cannot work (blind: Cloudflare's API without its credentials) or
paused by a 429, dead letters set aside in the last hour, outcome entries parked on their
endpoints.

Each figure is one cheap read (the brake's row and its holds, the heartbeats, the budget's
pause, the dead-letter topic's offsets now and an hour ago, the parked counts), and the list is
kept :data:`KEEP` seconds per process, so a page pays for it at most once in that time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, Protocol

import structlog

from consumers.components.brake import Brake
from consumers.operations.backends import Backends

__all__ = ["KEEP", "Incident", "current_incidents", "forget_incidents", "gather_incidents"]

KEEP = 2.0  # seconds a process reuses the list it gathered
DEAD_LETTER_WINDOW = timedelta(hours=1)
DEAD_LETTERS_COUNTED = 1000  # records read at most per partition to count the last hour's

Severity = Literal["critical", "warning"]

log = structlog.get_logger("auditrec")


@dataclass(frozen=True)
class Incident:
    """One thing that needs an operator: ``kind`` (``brake``, ``component``, ``pipeline``,
    ``probe_blind``, ``probe_paused``, ``dead_letters``, ``parked``; ``unchecked`` when a check
    failed), how bad, what to say, and where to act on it. A brake incident also carries its
    held count and since when."""

    kind: str
    severity: Severity
    message: str
    link: str
    held: int = 0
    since: str | None = None


class Operations(Protocol):
    """What the incidents use of :class:`~consumers.operations.service.Operations`."""

    backends: Backends

    def brake(self) -> Brake: ...

    async def missing(self) -> list[str]: ...


_kept: dict[int, tuple[float, list[Incident]]] = {}


async def current_incidents(ops: Operations) -> list[Incident]:
    """:func:`gather_incidents`, kept :data:`KEEP` seconds per ``ops``; a read that fails is
    an incident of its own rather than a page that fails."""
    now = time.monotonic()
    kept = _kept.get(id(ops))
    if kept is not None and now - kept[0] < KEEP:
        return kept[1]
    found = await gather_incidents(ops)
    _kept[id(ops)] = (time.monotonic(), found)
    return found


def forget_incidents(ops: Operations) -> None:
    """Drop what was kept for ``ops``: an action may have changed it."""
    _kept.pop(id(ops), None)


async def gather_incidents(ops: Operations) -> list[Incident]:
    """Every incident now, the most severe first."""
    backends = ops.backends
    checks: list[tuple[str, Callable[[], Awaitable[list[Incident]]]]] = [
        ("the mass-failure brake", lambda: _brake(ops)),
        ("the components", lambda: _components(backends)),
        ("the pipeline's processes", lambda: _pipeline(ops)),
        ("probing", lambda: _probing(backends)),
        ("the dead letters", lambda: _dead_letters(backends)),
        ("the parked deliveries", lambda: _parked(backends)),
    ]
    found: list[Incident] = []
    for what, check in checks:
        try:
            found.extend(await check())
        except Exception as exc:  # the banner must never take a page down with it
            log.warning("incident check failed", check=what, error=str(exc)[:300])
            message = f"cannot check {what}: {type(exc).__name__}: {exc}"[:300]
            found.append(Incident("unchecked", "warning", message, "/ui#components"))
    found.sort(key=lambda i: i.severity != "critical")
    return found


async def _brake(ops: Operations) -> list[Incident]:
    store = ops.backends.store
    state, holds = await asyncio.gather(store.brake.state(), store.brake.held_audits())
    if not state.engaged and not holds:
        return []
    since = _iso(state.since) if state.engaged else None
    if state.engaged:
        message = (
            f"Mass-failure brake engaged since {since}: {len(holds)} failure decision(s) held "
            "(the audits keep running until an operator releases or discards them)"
        )
    else:
        message = (
            f"{len(holds)} failure decision(s) held with the brake not engaged (a sweep's "
            "verdict, or an operator's release or discard, is being applied)"
        )
    return [Incident("brake", "critical", message, "/ui#brake", held=len(holds), since=since)]


async def _components(backends: Backends) -> list[Incident]:
    return [
        Incident("component", "critical", f"{name}: {why}", "/ui#components")
        for name, why in sorted(backends.health.problems().items())
        if why != "starting"
    ]


async def _pipeline(ops: Operations) -> list[Incident]:
    missing = await ops.missing()
    if not missing:
        return []
    return [
        Incident(
            "pipeline",
            "warning",
            f"no running `auditrec serve` runs {', '.join(missing)}: nothing is "
            "projected, reconciled or swept until one does",
            "/ui#components",
        )
    ]


async def _probing(backends: Backends) -> list[Incident]:
    blind = backends.settings.probing_blind()
    if blind is not None:
        return [Incident("probe_blind", "critical", f"Probing is blind: {blind}", "/ui")]
    paused = await backends.rate_limit().paused_for()
    if paused is None or paused <= 0:
        return []
    return [
        Incident(
            "probe_paused",
            "warning",
            f"Probing paused by a Cloudflare 429 for {paused:.0f}s more "
            "(audits are not probed until then)",
            "/ui#components",
        )
    ]


async def _dead_letters(backends: Backends) -> list[Incident]:
    log_ = backends.log
    topic = log_.topics.dead_letter
    since = backends.now() - DEAD_LETTER_WINDOW
    inspection = log_.inspection
    ends, then = await asyncio.gather(
        inspection.end_offsets(topic), inspection.offsets_at(topic, int(since.timestamp() * 1000))
    )
    count, more = 0, False
    for partition, end in ends.items():
        start = then.get(partition, end)
        if start >= end:
            continue
        first = max(start, end - DEAD_LETTERS_COUNTED)  # offsets count transaction markers too
        more = more or first > start
        async for batch in inspection.read(topic, partition, first, end):
            count += len(batch)
    if not count:
        return []
    shown = f"{count}+" if more else str(count)
    return [
        Incident(
            "dead_letters",
            "warning",
            f"{shown} dead letter(s) set aside in the last hour",
            "/ui/dead-letters",
        )
    ]


async def _parked(backends: Backends) -> list[Incident]:
    counts = await backends.store.deliveries.parked_counts()
    total = sum(counts.values())
    if not total:
        return []
    where = ", ".join(f"{name} {n}" for name, n in sorted(counts.items()))
    return [
        Incident(
            "parked",
            "warning",
            f"{total} outcome delivery(ies) parked ({where}): the endpoint refused them",
            "/ui/deliveries",
        )
    ]


def _iso(value: datetime | None) -> str | None:
    """The console's one timestamp format (UTC, ``2026-12-06 12:34:56Z``)."""
    if value is None:
        return None
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
