"""A bulk action's selection (:func:`consumers.operations.listing.matching`): every audit the
filter selects, across pages, newest first, cut at the limit and saying so."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from consumers.operations.listing import AuditFilter, matching
from projections.factory import open_store
from tests.contracts.projection_store import T0, positioned, started


async def test_matching_pages_through_every_selected_audit_and_says_when_it_cut(
    tmp_path: Path,
) -> None:
    async with open_store(f"sqlite:///{tmp_path}/audits.db") as store:
        await store.init()
        events = [started(f"a-{i}", T0 + timedelta(minutes=i), project_id="p") for i in range(7)]
        events.append(started("other", T0, project_id="q"))
        await store.writer.apply(positioned(events), {}, "projector")
        later = T0 + timedelta(hours=1)

        rows, cut = await matching(store.audits, AuditFilter(project="p"), later, 100, page=2)
        assert [r.audit_id for r in rows] == [f"a-{i}" for i in reversed(range(7))]
        assert cut is False

        rows, cut = await matching(store.audits, AuditFilter(project="p"), later, 5, page=2)
        assert [r.audit_id for r in rows] == [f"a-{i}" for i in (6, 5, 4, 3, 2)]
        assert cut is True

        old = AuditFilter(project="p", older_than=timedelta(minutes=57))
        rows, cut = await matching(store.audits, old, later, 100, page=2)
        assert [r.audit_id for r in rows] == ["a-2", "a-1", "a-0"]
