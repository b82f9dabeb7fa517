from collections.abc import Iterator

import pytest

from consumers.simulator import SimulatorServer


@pytest.fixture(scope="session")
def _simulator_server() -> Iterator[SimulatorServer]:
    with SimulatorServer() as server:
        yield server


@pytest.fixture
def simulator(_simulator_server: SimulatorServer) -> SimulatorServer:
    """The Workflows API simulator over real HTTP (one server per session, reset per test)."""
    _simulator_server.sim.reset()
    return _simulator_server
