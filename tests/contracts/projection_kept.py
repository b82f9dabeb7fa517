"""The contract of :class:`~projections.kept.KeptHistory`, history set aside for a rebuild over a
trimmed log: every adapter passes it unchanged.

Abstract (see :mod:`tests.contracts.projection_store` for what a backend provides).
"""

from __future__ import annotations

from projections.store import ProjectionStore
from statemachine.events import EVENT_ADAPTER
from tests.contracts.projection_store import (
    CONSUMER,
    TOPIC,
    StoreFixtures,
    at,
    progressed,
    started,
)

__all__ = ["KeptHistoryContract"]


class KeptHistoryContract(StoreFixtures):
    async def test_history_set_aside_survives_a_reset_until_dropped(
        self, store: ProjectionStore
    ) -> None:
        # given five events on two partitions
        events = [started("a-1"), progressed("a-1", at(1)), started("a-2", at(2))]
        batch = [(e, (TOPIC, 0, i)) for i, e in enumerate(events)]
        batch += [(started("b-1", at(3)), (TOPIC, 1, 0)), (started("b-2", at(4)), (TOPIC, 1, 1))]
        await store.writer.apply(batch, {(TOPIC, 0): 3, (TOPIC, 1): 2}, CONSUMER)

        # when what lies before offset 2 of partition 0 and offset 1 of partition 1 is set aside
        assert await store.kept.keep_history({(TOPIC, 0): 2, (TOPIC, 1): 1}) == 3
        await store.writer.reset(CONSUMER)

        # then it is there in the order it was projected, with its positions, after the reset
        kept = await store.kept.kept_history(0, 100)
        assert [pos for _, _, pos in kept] == [(TOPIC, 0, 0), (TOPIC, 0, 1), (TOPIC, 1, 0)]
        assert [EVENT_ADAPTER.validate_json(body).event_id for _, body, _ in kept] == [
            batch[0][0].event_id, batch[1][0].event_id, batch[3][0].event_id,
        ]  # fmt: skip
        assert await store.kept.kept_history(kept[0][0], 1) == kept[1:2]
        # and setting aside again (an interrupted rebuild) adds nothing twice
        assert await store.kept.keep_history({(TOPIC, 0): 2, (TOPIC, 1): 1}) == 3
        await store.kept.drop_kept_history()
        assert await store.kept.keep_history({(TOPIC, 0): 2}) == 0
        await store.kept.drop_kept_history()
