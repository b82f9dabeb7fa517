"""The pipeline's components on one backend pair, with their clocks at a fixed time: watchdog
→ probe (asking the simulator) → reconciler → projector, and the brake."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from consumers.components.brake import Brake
from consumers.components.probe import Probe
from consumers.components.projector import Projector
from consumers.components.reconciler import Reconciler
from consumers.components.watchdog import Watchdog
from consumers.workflows.client import WorkflowsClient
from consumers.workflows.discovery import Discovery
from statemachine.policy import Policy
from tests.contracts.projection_store import at
from tests.pipeline import Pipeline, run_until_idle

NOW = at(120)  # every audit below started at(0): stale, and past the instance-lost grace
POLICY = Policy()  # the brake engages at 20 instance_lost and more than half


class Stack:
    """The pipeline's components on one backend pair, clocks at NOW."""

    def __init__(
        self,
        pipeline: Pipeline,
        client: WorkflowsClient,
        *,
        batch_limit: int = 100,
        discovery: Discovery | None = None,
        policy: Policy = POLICY,
        clock: Callable[[], datetime] | None = lambda: NOW,
        stale_after: timedelta = timedelta(minutes=15),
        terminable: frozenset[str] = frozenset(),
    ) -> None:
        """``clock``: the components' (``None``: the wall clock's); ``terminable``: the
        workflows the probe may terminate instances of."""
        self.pipeline = pipeline
        store = pipeline.store
        clocked: dict[str, Any] = {} if clock is None else {"clock": clock}

        async def engaged() -> bool:
            return (await store.brake.state()).engaged

        self.brake = Brake(pipeline.log, store, policy, owner="test", **clocked)
        self.projector = Projector(pipeline.log, store.writer)
        self.reconciler = Reconciler(pipeline.log, policy, brake_engaged=engaged)
        self.probe = Probe(pipeline.log, client, terminable=terminable, **clocked)
        self.watchdog = Watchdog(
            pipeline.log,
            store,
            stale_after=stale_after,
            interval=timedelta(minutes=5),
            batch_limit=batch_limit,
            brake=self.brake,
            discovery=discovery,
            policy=policy,
            **clocked,
        )

    async def __aenter__(self) -> Stack:
        for c in (self.projector, self.reconciler, self.probe):
            await c.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for c in (self.probe, self.reconciler, self.projector):
            await c.stop()

    async def drain(self) -> None:
        self.reconciler._brake = (False, -1.0)  # read the brake afresh (it is cached 1 s)
        await run_until_idle(self.projector, self.reconciler, self.probe)

    async def sweep(self) -> None:
        """One tick, its answers drained, the verdict given, and what it released drained."""
        await self.drain()
        await self.watchdog.tick()
        await self.drain()
        await self.watchdog.judge(force=True)
        await self.drain()
