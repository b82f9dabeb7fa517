"""The contract of :class:`~projections.checkpoints.CheckpointStore`, checkpoints of stateful
consumers: every adapter passes it unchanged.

Abstract (see :mod:`tests.contracts.projection_store` for what a backend provides).
"""

from __future__ import annotations

from projections.store import ProjectionStore
from tests.contracts.projection_store import (
    TOPIC,
    MakeStore,
    StoreFixtures,
)

__all__ = ["CheckpointStoreContract"]


class CheckpointStoreContract(StoreFixtures):
    async def test_a_checkpoint_is_kept_per_consumer_and_partition_and_replaced(
        self, store: ProjectionStore, make_store: MakeStore
    ) -> None:
        assert await store.checkpoints.load_checkpoint("g-reconciler", TOPIC, 0) is None
        await store.checkpoints.save_checkpoint("g-reconciler", TOPIC, 0, 10, b"\x00state-10")
        await store.checkpoints.save_checkpoint("g-reconciler", TOPIC, 1, 7, b"other partition")
        await store.checkpoints.save_checkpoint("g-telemetry", TOPIC, 0, 3, b"other consumer")
        await store.checkpoints.save_checkpoint("g-reconciler", TOPIC, 0, 25, b"\x00state-25")
        async with make_store() as other:
            assert await other.checkpoints.load_checkpoint("g-reconciler", TOPIC, 0) == (
                25,
                b"\x00state-25",
            )
            assert await other.checkpoints.load_checkpoint("g-reconciler", TOPIC, 1) == (
                7,
                b"other partition",
            )
            assert await other.checkpoints.load_checkpoint("g-telemetry", TOPIC, 0) == (
                3,
                b"other consumer",
            )
            assert await other.checkpoints.checkpoint_offsets("g-reconciler", TOPIC) == {
                0: 25,
                1: 7,
            }
            assert await other.checkpoints.checkpoint_offsets("g-telemetry", TOPIC) == {0: 3}
            assert await other.checkpoints.checkpoint_offsets("g-telemetry", "other-topic") == {}
