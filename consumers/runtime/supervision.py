"""Supervision: start components, step each in its own loop, restart what fails, and stop
gracefully — forever (``serve``), or until every queue is drained (burst mode, ``--until-idle``).

Shutdown is graceful: a signal only sets the stop flag; each loop finishes the batch in hand,
commits and returns; stragglers are cancelled after a drain timeout. A failing step is retried
with bounded backoff after its component is restarted (which re-seeks to committed offsets).

The supervisor knows components only through :class:`~consumers.runtime.component.Component`;
what to build is handed to it by the composition root (``consumers/cli/assembly.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Protocol

import structlog

from consumers.runtime.component import Component
from consumers.runtime.health import HealthBoard
from consumers.runtime.metrics import CONSUMER_LAG
from consumers.runtime.outages import Outage, retrying
from statemachine.longlived import LongLived

__all__ = ["Builder", "Presence", "Supervisor"]

HEARTBEAT_EVERY = 2.0

log = structlog.get_logger("auditrec")

# Builds one component, given those built before it; ``None``: nothing to run (switched off).
Builder = Callable[[dict[str, Component]], Awaitable[Component | None]]


class Presence(Protocol):
    """Where a process announces the components it runs (heartbeats), and takes them back."""

    process_id: str

    async def heartbeat(self, names: Sequence[str]) -> None: ...

    async def forget(self) -> None: ...


class Supervisor(LongLived):
    """Some components in one process. ``async with`` builds and starts them, and stops them."""

    def __init__(
        self,
        builders: Sequence[tuple[str, Builder]],
        presence: Presence,
        health: HealthBoard | None = None,
    ) -> None:
        self.builders = list(builders)
        self.names = [name for name, _ in self.builders]
        self.presence = presence
        self.health = health or HealthBoard()
        self.components: dict[str, Component] = {}
        self.stopping = asyncio.Event()
        self._started = False
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._lag_series: dict[str, set[tuple[str, str, str]]] = {}

    async def start_early(self, names: Collection[str]) -> None:
        """Build, start and run the components ``names`` (the HTTP API) at once, before the
        backends are connected, so that what they serve answers from the first second (and
        readiness says the others are still starting)."""
        for name, _ in self.builders:
            self.health.expect(name)
        for name, builder in self.builders:
            if name not in names or name in self.components:
                continue
            component = await builder(self.components)
            if component is None:
                self.health.forget(name)
                continue
            await component.start()
            self.components[name] = component
            self.health.started(name)
            self._tasks[name] = asyncio.create_task(self._loop(component), name=name)

    async def start(self, *, wait: float = 0.0) -> None:
        """Build the components in order, then start them all at once (each joins its
        consumer group concurrently with the others). With ``wait`` > 0, a retriable failure
        (a group coordinator not ready yet) stops what started and tries again with backoff;
        the cause of a failure that ends it is logged."""
        if self._started:
            return
        early = set(self.components)

        async def build() -> None:
            for name, builder in self.builders:
                if name in early:
                    continue
                self.health.expect(name)
                component = await builder(self.components)
                if component is None:
                    self.health.forget(name)
                else:
                    self.components[name] = component
            fresh = {n: c for n, c in self.components.items() if n not in early}
            started = await asyncio.gather(
                *(c.start() for c in fresh.values()), return_exceptions=True
            )
            for name, outcome in zip(fresh, started, strict=True):
                if isinstance(outcome, BaseException):
                    log.warning(
                        "component did not start",
                        component=name,
                        error=f"{type(outcome).__name__}: {outcome}",
                    )
                    raise outcome
                self.health.started(name)

        async def undo() -> None:
            await self._stop([n for n in self.components if n not in early])

        await retrying(build, undo, wait=wait, what="components")
        self._started = True

    async def stop(self) -> None:
        for component in self.components.values():
            component.interrupt()
        left = [t for t in self._tasks.values() if not t.done()]  # started early, never run
        for task in left:
            task.cancel()
        await asyncio.gather(*left, return_exceptions=True)
        self._tasks.clear()
        await self._stop(list(self.components))
        self._started = False
        with contextlib.suppress(Exception):
            await self.presence.forget()

    async def _stop(self, names: Sequence[str]) -> None:
        for name in reversed(names):
            component = self.components.pop(name)
            try:
                await component.stop()
            except Exception as exc:  # keep stopping the others
                log.warning("component stop failed", component=component.name, error=str(exc))

    # -- running ----------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        outage = Outage("heartbeat", log)
        while not self.stopping.is_set():
            try:
                await self.presence.heartbeat(list(self.components))
                for name, c in list(self.components.items()):
                    if c.group is not None:
                        lags = await c.lags()
                        self._report_lags(name, lags)
                        self.health.lagging(name, sum(lags.values()))
                outage.recovered()
            except Exception as exc:
                outage.failed(exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), HEARTBEAT_EVERY)

    def _report_lags(self, name: str, lags: dict[tuple[str, int], int]) -> None:
        """Each assigned partition's lag; the series of partitions gone elsewhere removed."""
        now = {(name, t, str(p)) for t, p in lags}
        for gone in self._lag_series.get(name, set()) - now:
            with contextlib.suppress(KeyError):
                CONSUMER_LAG.remove(*gone)
        for (t, p), lag in lags.items():
            CONSUMER_LAG.labels(name, t, str(p)).set(lag)
        self._lag_series[name] = now

    async def _loop(self, component: Component) -> None:
        backoff = 0.2
        outage = Outage(component.name, log, component=component.name)
        while not self.stopping.is_set():
            try:
                handled = await component.step()
                self.health.stepped(component.name, handled)
                outage.recovered()
                backoff = 0.2
                if handled == 0 and not component.drains:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.stopping.wait(), 0.5)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._failed(component, exc, outage, "step failed; restarting component")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), backoff)
                backoff = min(backoff * 2, 30.0)
                with contextlib.suppress(Exception):
                    await component.stop()
                try:
                    await component.start()
                except Exception as start_error:  # the next step fails again; say why now
                    self._failed(component, start_error, outage, "component restart failed")

    def _failed(self, component: Component, exc: Exception, outage: Outage, what: str) -> None:
        """Count a failure on the health board; log it, or a retriable one once per outage."""
        self.health.failed(component.name, exc)
        if getattr(exc, "retriable", False):
            outage.failed(exc)  # the log or the store is down: said once
            return
        log.error(
            what,
            component=component.name,
            error_class=type(exc).__name__,
            error=str(exc)[:500],
            exc_info=True,
        )

    async def run(self, *, drain_timeout: float = 10.0) -> None:
        """Run until :attr:`stopping` is set (SIGINT/SIGTERM when installed)."""
        for name, component in self.components.items():
            if name not in self._tasks:
                self._tasks[name] = asyncio.create_task(self._loop(component), name=name)
        tasks = list(self._tasks.values())
        tasks.append(asyncio.create_task(self._heartbeat_loop(), name="heartbeat"))
        log.info("serving", components=list(self.components), process=self.presence.process_id)
        await self.stopping.wait()
        log.info("stopping: finishing the batches in hand")
        for component in self.components.values():
            component.interrupt()
        done, pending = await asyncio.wait(tasks, timeout=drain_timeout)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                log.error(
                    "task ended with an error", task=task.get_name(), error=str(task.exception())
                )

    def install_signal_handlers(self) -> None:
        """SIGINT/SIGTERM stop gracefully; a second one exits at once (what is committed is
        safe; the batches in hand are read again by whoever owns them next)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, self._signalled)

    def _signalled(self) -> None:
        if not self.stopping.is_set():
            self.stopping.set()
            return
        log.warning("second signal: exiting now, without finishing the batches in hand")
        sys.stderr.flush()
        os._exit(130)

    async def drain(self, *, timeout: float = 120.0, quiet_rounds: int = 2) -> bool:
        """Step every log consumer until all are caught up and nothing moves; True if drained."""
        consumers = [c for c in self.components.values() if c.drains]
        for c in consumers:
            c.poll_timeout = 0.05
        deadline = time.monotonic() + timeout
        quiet = 0
        while time.monotonic() < deadline:
            handled = 0
            for c in consumers:
                handled += await c.step()
            if handled == 0 and all([await c.idle() for c in consumers]):
                quiet += 1
                if quiet >= quiet_rounds:
                    return True
            else:
                quiet = 0
        return False

    async def run_until_idle(self, *, timeout: float = 300.0) -> bool:
        """Drain, give each component its burst (the watchdog ticks once), drain again."""
        await self.presence.heartbeat(list(self.components))
        drained = await self.drain(timeout=timeout)
        bursting = [c for c in self.components.values() if not c.drains]
        for component in bursting:
            await component.burst()
        if bursting:
            drained = await self.drain(timeout=timeout) and drained
            for _ in range(10):  # what settling produced is drained in turn
                settled = sum([await c.settle() for c in bursting])
                if not settled:
                    break
                drained = await self.drain(timeout=timeout) and drained
        return drained
