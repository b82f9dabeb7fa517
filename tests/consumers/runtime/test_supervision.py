"""The supervisor on each backend pair (its presence is the process's real heartbeat rows): a
failing component is restarted with backoff, ``drain()`` knows when the log consumers are
done, ``stop()`` stops everything, and ``run()`` ends when told to.

The components here that are not the projector are small :class:`Component` implementations
that record what the supervisor does to them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
import structlog

from consumers.components.projector import Projector
from consumers.operations.backends import Backends
from consumers.runtime.component import Component
from consumers.runtime.settings import load_settings
from consumers.runtime.supervision import Builder, Supervisor
from statemachine.errors import EventLogError
from tests.conftest import Backend
from tests.contracts.projection_store import at, progressed, started
from tests.eventually import eventually
from tests.pipeline import append


@pytest.fixture
async def backends(backend: Backend) -> AsyncIterator[Backends]:
    settings = load_settings(
        event_log_url=backend.event_log_url,
        database_url=backend.database_url,
        topic_prefix=backend.topic_prefix,
        kafka_lifecycle_partitions=3,
    )
    async with Backends(settings) as backends:
        yield backends


class Recording(Component):
    """Records its lifecycle in ``calls``; steps fail ``failures`` times first."""

    def __init__(self, name: str, *, failures: int = 0, stop_fails: bool = False) -> None:
        self.name = name
        self.failures = failures
        self.stop_fails = stop_fails
        self.calls: list[str] = []
        self.failed_at: list[float] = []
        self.started_at: list[float] = []
        self.steps = 0

    async def start(self) -> None:
        self.calls.append("start")
        self.started_at.append(time.monotonic())

    async def stop(self) -> None:
        self.calls.append("stop")
        if self.stop_fails:
            raise RuntimeError(f"{self.name} cannot stop")

    async def step(self) -> int:
        await asyncio.sleep(0)  # a step yields to the loop, as real ones do
        if self.failures:
            self.failures -= 1
            self.failed_at.append(time.monotonic())
            self.calls.append("step failed")
            raise RuntimeError("broken step")
        self.steps += 1
        if self.calls[-1] != "step":
            self.calls.append("step")
        return 1


class Serving(Component):
    """A step that runs until interrupted, like the API server."""

    name = "serving"

    def __init__(self) -> None:
        self.serving = asyncio.Event()
        self.interrupted = asyncio.Event()
        self.returned = False

    async def step(self) -> int:
        self.serving.set()
        await self.interrupted.wait()
        self.returned = True
        return 0

    def interrupt(self) -> None:
        self.interrupted.set()


class Stuck(Component):
    """A step that ignores interrupt()."""

    name = "stuck"

    def __init__(self) -> None:
        self.begun = asyncio.Event()
        self.cancelled = False

    async def step(self) -> int:
        self.begun.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return 0


class Backlogged(Component):
    """A log consumer that never catches up."""

    name = "backlogged"
    drains = True

    async def step(self) -> int:
        await asyncio.sleep(0)  # a step yields to the loop, as real ones do
        return 0

    async def idle(self) -> bool:
        return False


def given(component: Component) -> tuple[str, Builder]:
    async def build(built: dict[str, Component]) -> Component:
        return component

    return component.name, build


async def test_a_component_whose_step_fails_is_restarted_with_backoff_and_keeps_going(
    backends: Backends,
) -> None:
    # given a component whose first two steps raise
    flaky = Recording("flaky", failures=2)
    supervisor = Supervisor([given(flaky)], backends)

    # when the supervisor runs it
    async with supervisor:
        running = asyncio.create_task(supervisor.run(drain_timeout=2))
        await eventually(lambda: flaky.steps, until=lambda n: n >= 20, message="20 good steps")
        supervisor.stopping.set()
        await asyncio.wait_for(running, 10)

    # then each failure restarted it (stop, start), and it kept stepping
    assert flaky.calls == [
        "start", "step failed", "stop", "start", "step failed", "stop", "start", "step", "stop",
    ]  # fmt: skip
    # after a backoff that doubles: 0.2 s, then 0.4 s
    assert flaky.started_at[1] - flaky.failed_at[0] >= 0.2
    assert flaky.started_at[2] - flaky.failed_at[1] >= 0.4


async def test_drain_is_true_once_every_log_consumer_is_idle(backends: Backends) -> None:
    # given events in the log, a projector, and a component that does not drain (it would
    # fail if stepped)
    events = [started("a-1", at(0)), progressed("a-1", at(1), pages_crawled=7)]
    await append(backends.log, backends.topics.lifecycle, events)
    not_drained = Recording("watchdog-like", failures=1000)
    supervisor = Supervisor(
        [("projector", _projector(backends)), given(not_drained)],
        backends,
    )

    # when the supervisor drains
    async with supervisor:
        drained = await supervisor.drain(timeout=30)

    # then everything in the log was projected, and only log consumers were stepped
    assert drained is True
    row = await backends.store.audits.get("a-1")
    assert row is not None and (row.version, row.state.pages_crawled) == (2, 7)
    assert not_drained.calls == ["start", "stop"]


async def test_drain_is_false_when_a_log_consumer_does_not_catch_up_in_time(
    backends: Backends,
) -> None:
    supervisor = Supervisor([("projector", _projector(backends)), given(Backlogged())], backends)
    async with supervisor:
        began = time.monotonic()
        drained = await supervisor.drain(timeout=0.5)
    assert drained is False
    assert time.monotonic() - began >= 0.5


async def test_stop_stops_every_component_even_when_one_stop_fails(backends: Backends) -> None:
    # given three started components, the middle one failing to stop, and their heartbeats
    first, broken, last = (
        Recording("first"),
        Recording("broken", stop_fails=True),
        Recording("last"),
    )
    supervisor = Supervisor([given(first), given(broken), given(last)], backends)
    await supervisor.start()
    await backends.heartbeat(supervisor.names)
    assert backends.process_id in (await backends.live_components())["first"]

    # when the supervisor stops
    await supervisor.stop()

    # then all three were stopped, and the process no longer announces them
    assert [c.calls for c in (first, broken, last)] == [["start", "stop"]] * 3
    assert supervisor.components == {}
    assert await backends.live_components() == {}


async def test_run_returns_once_stopping_is_set_and_interrupts_components(
    backends: Backends,
) -> None:
    # given a server-like component and a looping one, run by the supervisor
    serving, looping = Serving(), Recording("looping")
    supervisor = Supervisor([given(serving), given(looping)], backends)
    async with supervisor:
        running = asyncio.create_task(supervisor.run(drain_timeout=10))
        await asyncio.wait_for(serving.serving.wait(), 10)
        live = await eventually(backends.live_components, message="the heartbeat")
        assert {backends.process_id} == set(live["serving"]) == set(live["looping"])

        # when it is told to stop
        supervisor.stopping.set()
        await asyncio.wait_for(running, 5)

        # then the server was interrupted and returned from its step, and the loops ended
        assert serving.interrupted.is_set() and serving.returned
        assert looping.steps > 0


async def test_run_cancels_a_step_that_ignores_the_stop_after_the_drain_timeout(
    backends: Backends,
) -> None:
    stuck = Stuck()
    supervisor = Supervisor([given(stuck)], backends)
    async with supervisor:
        running = asyncio.create_task(supervisor.run(drain_timeout=0.3))
        await asyncio.wait_for(stuck.begun.wait(), 10)
        supervisor.stopping.set()
        began = time.monotonic()
        await asyncio.wait_for(running, 5)
    assert stuck.cancelled
    assert time.monotonic() - began >= 0.3  # it was given its drain time (wait_for bounds it)


def _projector(backends: Backends) -> Builder:
    async def build(built: dict[str, Component]) -> Component:
        return Projector(backends.log, backends.store.writer)

    return build


async def test_a_component_that_keeps_failing_is_named_on_the_health_board(
    backends: Backends,
) -> None:
    # given a component whose steps all raise
    broken = Recording("broken", failures=10_000)
    supervisor = Supervisor([given(broken)], backends, backends.health)

    # when the supervisor has run it for a while
    async with supervisor:
        running = asyncio.create_task(supervisor.run(drain_timeout=2))
        problems = await eventually(
            backends.health.problems, until=lambda p: "broken" in p, message="broken named"
        )
        supervisor.stopping.set()
        await asyncio.wait_for(running, 10)

    # then the board (what /readyz reports) says it is failing, and why
    assert problems["broken"].startswith("failing (3 steps in a row)")


async def test_components_started_early_serve_while_the_others_are_still_starting(
    backends: Backends,
) -> None:
    # given a serving component started early, and another one
    server, other = Serving(), Recording("other")
    supervisor = Supervisor([given(other), given(server)], backends)

    # when only the early one is started
    await supervisor.start_early(["serving"])
    try:
        # then it serves already, and the health board says the other is starting
        await asyncio.wait_for(server.serving.wait(), 5)
        assert other.calls == []
        assert supervisor.health.problems() == {"other": "starting"}

        # and once the rest is started and run, both are well and a stop ends both
        await supervisor.start()
        assert other.calls == ["start"] and supervisor.health.problems() == {}
        running = asyncio.create_task(supervisor.run(drain_timeout=2))
        await eventually(lambda: other.steps, until=lambda n: n > 0, message="other steps")
        supervisor.stopping.set()
        await asyncio.wait_for(running, 10)
    finally:
        await supervisor.stop()
    assert server.returned and other.calls[-1] == "stop"


class Unavailable(Recording):
    """Its steps fail with a retriable error (the log is down) ``failures`` times."""

    async def step(self) -> int:
        await asyncio.sleep(0)  # a step yields to the loop, as real ones do
        if self.failures:
            self.failures -= 1
            raise EventLogError("the broker is down", retriable=True)
        self.steps += 1
        return 1


async def test_a_retriable_outage_is_logged_once_when_it_begins_and_once_when_it_ends(
    backends: Backends,
) -> None:
    # given a component whose steps fail four times because the log is down
    down = Unavailable("down", failures=4)
    supervisor = Supervisor([given(down)], backends)

    # when the supervisor runs it through the outage
    with structlog.testing.capture_logs() as logs:
        async with supervisor:
            running = asyncio.create_task(supervisor.run(drain_timeout=2))
            await eventually(lambda: down.steps, until=lambda n: n > 0, timeout=20)
            supervisor.stopping.set()
            await asyncio.wait_for(running, 10)

    # then one warning named the error class, one line said it recovered, nothing else warned
    mine = [x for x in logs if x.get("component") == "down"]
    assert [(x["log_level"], x["event"]) for x in mine if x["log_level"] != "debug"] == [
        ("warning", "down: unavailable; retrying"),
        ("info", "down: recovered"),
    ]
    assert mine[0]["error_class"] == "EventLogError"
    assert next(x for x in mine if x["event"] == "down: recovered")["failures"] == 4
