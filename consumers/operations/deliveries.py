"""The outcome feed as operators see it (``auditrec deliveries``, ``/deliveries``): the endpoints,
the entries parked on them, and asking for their retry.

A retry is per audit (:mod:`projections.deliveries`): asking for one entry asks for every entry
of its audit parked on that endpoint, and the endpoint's feed delivers them in order within a
few seconds, wherever it runs. An entry that fails again is parked again with the new error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import structlog

from consumers.runtime.endpoints import Endpoint
from consumers.runtime.settings import Settings
from projections.store import ProjectionStore
from projections.values import ParkedEntry
from statemachine.errors import ConfigError, InvalidInput

__all__ = ["MAX_LIMIT", "MAX_SEQ", "list_deliveries", "retry_deliveries"]

log = structlog.get_logger("auditrec")

MAX_LIMIT = 1000
MAX_SEQ = 2**63 - 1  # the largest seq a store numbers parked entries with
_OUTCOME_ID = re.compile(r"out_[0-9a-f]{32}")
_EVERY = 1_000_000  # "all of them", for looking ids up among the parked entries


def _endpoints(settings: Settings) -> list[Endpoint]:
    try:
        return list(settings.outcome_endpoints())
    except ConfigError:
        return []  # doctor and serve say what is wrong; the parked entries are still shown


def _entry(row: ParkedEntry) -> dict[str, Any]:
    try:
        body = json.loads(row.body)
    except ValueError:
        body = {}
    return {
        "seq": row.seq,
        "endpoint": row.endpoint,
        "outcome_id": row.outcome_id,
        "type": body.get("type"),
        "audit_id": row.audit_id,
        "status": body.get("status"),
        "decided_at": body.get("decided_at"),
        "attempts": row.attempts,
        "error": row.error,
        "parked_at": row.parked_at,
        "retry_requested_at": row.retry_requested_at,
        "retry_requested_by": row.retry_requested_by,
    }


def _known(settings: Settings, counts: dict[str, int], endpoint: str | None) -> None:
    names = {e.name for e in _endpoints(settings)} | set(counts)
    if endpoint is not None and endpoint not in names:
        raise InvalidInput(
            f"endpoint: unknown endpoint {endpoint[:80]!r}; "
            f"known: {', '.join(sorted(names)) or '(none)'}"
        )


async def list_deliveries(
    store: ProjectionStore,
    settings: Settings,
    *,
    endpoint: str | None = None,
    limit: int = 100,
    after: int = 0,
) -> dict[str, Any]:
    """The endpoints (configured here, or with parked entries) and the parked entries, oldest
    first, ``limit`` a page from ``after`` (a ``seq``)."""
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"limit: must be 1 to {MAX_LIMIT}, not {limit}")
    if not 0 <= after <= MAX_SEQ:
        raise InvalidInput(f"after: must be 0 to {MAX_SEQ}, not {after}")
    counts = await store.deliveries.parked_counts()
    _known(settings, counts, endpoint)
    configured = {e.name: e for e in _endpoints(settings)}
    endpoints = [
        {
            "name": name,
            "kind": e.kind if e else ("queue" if name.startswith("queue-") else "webhook"),
            "target": e.target if e else None,
            "types": sorted(e.types) if e and e.types else None,
            "configured": e is not None,
            "parked": counts.get(name, 0),
        }
        for name in sorted(set(configured) | set(counts))
        for e in [configured.get(name)]
    ]
    rows = await store.deliveries.parked(endpoint, limit=limit + 1, after=after)
    page = rows[:limit]
    return {
        "endpoints": endpoints,
        "parked": [_entry(r) for r in page],
        "total": sum(counts.values()) if endpoint is None else counts.get(endpoint, 0),
        "next_after": page[-1].seq if len(rows) > limit else None,
    }


async def retry_deliveries(
    store: ProjectionStore,
    settings: Settings,
    *,
    outcome_ids: Sequence[str] | None,
    endpoint: str | None,
    actor: str,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Ask for the retry of ``outcome_ids`` (``None``: every parked entry) on ``endpoint``
    (``None``: every endpoint). An id not parked there is refused, and nothing is asked for."""
    if outcome_ids is not None:
        if not outcome_ids:
            raise InvalidInput("ids: name at least one parked entry, or ask for all of them")
        bad = [i for i in outcome_ids if not _OUTCOME_ID.fullmatch(i)]
        if bad:
            raise InvalidInput(
                f"ids: {', '.join(repr(i[:60]) for i in bad[:5])} "
                f"{'is' if len(bad) == 1 else 'are'} not an outcome id (out_ and 32 hex digits)"
            )
    counts = await store.deliveries.parked_counts()
    _known(settings, counts, endpoint)
    parked = await store.deliveries.parked(endpoint, limit=_EVERY)
    if outcome_ids is not None:
        wanted = set(outcome_ids)
        unknown = sorted(wanted - {r.outcome_id for r in parked})
        if unknown:
            where = f" on {endpoint}" if endpoint else ""
            raise InvalidInput(
                f"ids: not parked{where}: {', '.join(unknown[:5])}"
                + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
            )
        audits = {(r.endpoint, r.audit_id) for r in parked if r.outcome_id in wanted}
        chosen = [r for r in parked if (r.endpoint, r.audit_id) in audits]
    else:
        chosen = list(parked)
    requested = 0
    if not dry_run and chosen:
        requested = await store.deliveries.request_retry(
            endpoint, outcome_ids, actor, datetime.now(UTC)
        )
        log.info(
            "outcome deliveries retried",
            actor=actor,
            endpoint=endpoint,
            entries=requested,
            named=len(outcome_ids) if outcome_ids is not None else "all",
        )
    return {
        "dry_run": dry_run,
        "entries": [_entry(r) for r in chosen],
        "requested": requested,
    }
