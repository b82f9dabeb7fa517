"""The contract of :class:`~projections.telemetry.SentTelemetry`, the telemetry outbox's record of
sent events: every adapter passes it unchanged.

Abstract (see :mod:`tests.contracts.projection_store` for what a backend provides).
"""

from __future__ import annotations

import uuid

from projections.store import ProjectionStore
from tests.contracts.projection_store import (
    CONSUMER,
    StoreFixtures,
    at,
)

__all__ = ["SentTelemetryContract"]


class SentTelemetryContract(StoreFixtures):
    async def test_telemetry_sent_is_remembered_idempotently(self, store: ProjectionStore) -> None:
        one, two, three = (str(uuid.uuid4()) for _ in range(3))
        assert await store.telemetry.telemetry_sent([one, two]) == set()
        await store.telemetry.mark_telemetry_sent(one, at(1))
        await store.telemetry.mark_telemetry_sent(one, at(2))  # again: no error, still once
        await store.telemetry.mark_telemetry_sent(three, at(3))
        assert await store.telemetry.telemetry_sent([one, two, three]) == {one, three}
        assert await store.telemetry.telemetry_sent([]) == set()
        await store.writer.reset(CONSUMER)  # a rebuild does not forget what was sent
        assert await store.telemetry.telemetry_sent([one]) == {one}
