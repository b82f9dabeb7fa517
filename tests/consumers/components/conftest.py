"""What the component tests share: a Workflows client talking to the simulator over real HTTP,
with a fake clock for its waits."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from consumers.workflows.client import WorkflowsClient
from consumers.workflows.simulator.server import SimulatorServer
from tests.clock import FakeClock


@pytest.fixture
async def client(simulator: SimulatorServer) -> AsyncIterator[WorkflowsClient]:
    clock = FakeClock()
    async with WorkflowsClient(
        api_url=simulator.url,
        account_id="acc",
        workflow="site-audit",
        api_token=None,
        timeout=5.0,
        max_retries=0,
        clock=clock,
        sleep=clock.sleep,
    ) as client:
        yield client
