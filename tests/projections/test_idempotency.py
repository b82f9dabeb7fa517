"""The history's key ``(audit_id, event_id)`` as a property, on SQLite and PostgreSQL: any
interleaving of events, duplicates (the same key and content, another time and producer) and
conflicts (the same key, other content), cut into batches anyhow, applies exactly the first
content of each key once, and hands over every conflict once, by its index."""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.factory import open_store
from projections.store import ProjectionStore
from projections.values import Position
from statemachine.events import AuditEvent
from tests.contracts.projection_store import (
    CONSUMER,
    TOPIC,
    pure_fold,
    same_row,
)
from tests.interleavings import AUDITS, IDS, PRODUCERS, event_of, expected_of
from tests.services import postgres_url

# One step of an interleaving: which audit, which event id, which content, when, from whom.
steps = st.tuples(
    st.sampled_from(AUDITS),
    st.sampled_from(range(len(IDS))),
    st.sampled_from(range(4)),
    st.integers(0, 59),
    st.sampled_from(PRODUCERS),
)
scenarios = st.tuples(
    st.lists(steps, min_size=1, max_size=24), st.lists(st.booleans(), max_size=24)
)


async def check(store: ProjectionStore, events: list[AuditEvent], cuts: list[bool]) -> None:
    positioned: list[tuple[AuditEvent, Position]] = [
        (e, (TOPIC, 0, i)) for i, e in enumerate(events)
    ]
    batches: list[list[tuple[AuditEvent, Position]]] = [[]]
    for i, item in enumerate(positioned):
        batches[-1].append(item)
        if i < len(cuts) and cuts[i]:
            batches.append([])
    handed: list[int] = []
    for batch in batches:

        async def hand(
            conflicts: Sequence[tuple[int, str]], batch: list[tuple[AuditEvent, Position]] = batch
        ) -> None:
            handed.extend(batch[i][1][2] for i, _ in conflicts)

        result = await store.writer.apply(
            batch, {(TOPIC, 0): batch[-1][1][2] + 1 if batch else 0}, CONSUMER, None, hand
        )
        assert result.applied + result.skipped + len(result.conflicts) == len(batch)

    applied, conflicts = expected_of(events)
    # every conflict handed over once, and only conflicts
    assert sorted(handed) == sorted(conflicts)
    # each key's first content applied once, in log order, and the rows folded from them alone
    for audit_id in AUDITS:
        mine = [e for e in applied if e.audit_id == audit_id]
        assert [h.event for h in await store.audits.history(audit_id)] == mine
    rows = {r.audit_id: r async for r in store.audits.iter_rows()}
    folded = pure_fold(applied)
    assert set(rows) == set(folded)
    for audit_id, row in folded.items():
        assert same_row(rows[audit_id], row), (rows[audit_id], row)


async def on_sqlite(events: list[AuditEvent], cuts: list[bool]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with open_store(f"sqlite:///{Path(tmp) / 'p.db'}") as store:
            await store.init()
            await check(store, events, cuts)


async def on_postgres(events: list[AuditEvent], cuts: list[bool]) -> None:
    schema = f"t_{uuid.uuid4().hex[:16]}"
    try:
        async with open_store(postgres_url(), schema=schema, max_size=2) as store:
            await store.init()
            await check(store, events, cuts)
    finally:
        conn = await asyncpg.connect(postgres_url())
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()


@pytest.mark.parametrize(
    "backend",
    [on_sqlite, pytest.param(on_postgres, marks=pytest.mark.postgres)],
    ids=["sqlite", "postgres"],
)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_any_interleaving_applies_each_keys_first_content_once_and_hands_over_every_conflict(
    backend: object, scenario: tuple[list[tuple[str, int, int, int, str]], list[bool]]
) -> None:
    steps_, cuts = scenario
    events = [event_of(*step) for step in steps_]
    asyncio.run(backend(events, cuts))  # type: ignore[operator]
