"""The projection store contract, continued: the histories of many audits read at once
(:meth:`ProjectionStore.histories`) are each audit's :meth:`ProjectionStore.history`.

A mixin of the backends' test classes beside
:class:`~tests.contracts.projection_store.ProjectionStoreContract`, whose ``store`` fixture it
uses.
"""

from __future__ import annotations

from projections.store import ProjectionStore
from tests.contracts.projection_store import CONSUMER, lifecycle_mix, positioned, started

__all__ = ["HistoriesContract"]


class HistoriesContract:
    async def test_histories_of_many_audits_are_each_audits_history(
        self, store: ProjectionStore
    ) -> None:
        # given a mix of audits, and more audits than one read of the adapters takes
        batch = positioned(lifecycle_mix())
        many = positioned([started(f"m-{i:04d}") for i in range(1200)], partition=1)
        await store.apply(batch[:7], {}, CONSUMER)
        await store.apply(batch[7:] + many, {}, CONSUMER)
        mixed = sorted({e.audit_id for e, _ in batch})

        # when their histories are read at once (an unknown audit among them)
        asked = [*reversed(mixed), "a-unknown", *(e.audit_id for e, _ in many)]
        found = await store.histories(asked)

        # then each is the audit's own history, in log order, with positions
        assert list(found) == asked
        for audit_id in mixed:
            assert found[audit_id] == await store.history(audit_id)
            assert found[audit_id]  # every audit of the mix has events
        assert found["a-unknown"] == []
        assert [[h.event for h in found[e.audit_id]] for e, _ in many] == [[e] for e, _ in many]
        assert [found[e.audit_id][0].position for e, p in many] == [p for _, p in many]
        assert await store.histories([]) == {}
