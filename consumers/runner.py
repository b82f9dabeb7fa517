"""The composition root: builds the event log, the store and the components from settings,
and runs them — forever (``serve``), or until every queue is drained (``--until-idle``).

Shutdown is graceful: a signal only sets the stop flag; each loop finishes the batch in hand,
commits and returns; stragglers are cancelled after a drain timeout. A failing step is retried
with bounded backoff after its component is restarted (which re-seeks to committed offsets).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from projections.errors import ConfigError
from projections.lifecycle import Lifecycle
from projections.store import ProjectionStore, open_store

from .component import Component, LogConsumer
from .eventlog import EventLog, Topics, open_event_log
from .metrics import CONSUMER_LAG
from .settings import Settings

__all__ = ["COMPONENTS", "Runtime", "Service", "parse_components", "tune_gc"]

COMPONENTS = ("projector", "reconciler", "probe", "watchdog", "telemetry", "api")
PIPELINE = ("projector", "reconciler", "probe")
HEARTBEAT_EVERY = 2.0
LIVE_WITHIN = timedelta(seconds=10)

log = structlog.get_logger("auditrec")


async def retrying(
    attempt: Callable[[], Awaitable[None]],
    undo: Callable[[], Awaitable[None]],
    *,
    wait: float,
    what: str,
) -> None:
    """Run ``attempt``; on a retriable failure ``undo`` what it did and try again with
    bounded backoff until ``wait`` seconds have passed (0: one attempt)."""
    deadline = time.monotonic() + wait
    backoff = 0.5
    while True:
        try:
            await attempt()
            return
        except Exception as exc:
            await undo()
            if not getattr(exc, "retriable", False) or time.monotonic() + backoff > deadline:
                raise
            log.warning(f"{what}; retrying", error=str(exc), retry_in=backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 10.0)


def tune_gc() -> None:
    """Collect garbage less often in a long-running consumer.

    Consumers create and drop many small acyclic objects (events, states, records) while
    holding a large live heap (one state per audit); with the default thresholds the cyclic
    collector rescans that heap constantly (measured: decoding cost 23 µs/event with the
    defaults, 9 µs with these). Objects alive at start-up are frozen out of collection.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(500_000, 50, 100)


def parse_components(text: str | None) -> list[str]:
    if not text:
        return list(COMPONENTS)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in COMPONENTS]
    if unknown or not names:
        raise ConfigError(
            f"--only: unknown component(s) {', '.join(unknown) or '(none)'}; "
            f"choose from {', '.join(COMPONENTS)}"
        )
    return list(dict.fromkeys(names))


class Runtime(Lifecycle):
    """The shared resources: event log, projection store, and (lazily) the Workflows client."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topics = Topics(settings.topic_prefix)
        self.log: EventLog = open_event_log(
            settings.event_log_url, self.topics, **_kafka_options(settings)
        )
        try:
            self.store: ProjectionStore = open_store(settings.database_url)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self.policy = settings.policy()
        self._client: Any = None
        self._started = False
        self.process_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"

    async def start(self, *, init: bool = True, wait: float = 0.0, with_log: bool = True) -> None:
        """Connect (and create topics/tables). With ``wait`` > 0, retriable failures (the
        broker or the database not up yet) are retried with backoff for that many seconds.
        ``with_log=False`` connects the projection store only (read-only commands)."""
        if self._started:
            return

        async def connect() -> None:
            if with_log:
                await self.log.start()
            await self.store.start()
            if init:
                if with_log:
                    await self.log.init()
                await self.store.init()

        await retrying(connect, self.stop, wait=wait, what="not ready")
        self._started = True

    async def stop(self) -> None:
        self._started = False
        if self._client is not None:
            await self._client.stop()
            self._client = None
        await self.store.stop()
        await self.log.stop()

    async def client(self) -> Any:
        if self._client is None:
            from .workflows import WorkflowsClient

            s = self.settings
            token = s.cloudflare_api_token.get_secret_value() if s.cloudflare_api_token else None
            self._client = WorkflowsClient(
                api_url=s.cloudflare_api_url,
                account_id=s.cloudflare_account_id,
                workflow=s.cloudflare_workflow,
                api_token=token,
                concurrency=s.probe_concurrency,
                budget=s.probe_budget,
                budget_window=s.probe_budget_window.total_seconds(),
                timeout=s.probe_timeout.total_seconds(),
            )
            await self._client.start()
        return self._client

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def live_components(self) -> dict[str, list[str]]:
        return await self.store.live_components(self.now() - LIVE_WITHIN)


def _kafka_options(settings: Settings) -> dict[str, Any]:
    if not settings.event_log_url.startswith("kafka://"):
        return {}
    return {"settings": settings}


class Service(Lifecycle):
    """Some components on one runtime. ``async with`` starts and stops them."""

    def __init__(self, runtime: Runtime, names: Iterable[str]) -> None:
        self.runtime = runtime
        self.names = [n for n in COMPONENTS if n in set(names)]
        self.components: dict[str, Component] = {}
        self.stopping = asyncio.Event()
        self._api_server: Any = None

    async def _build(self, name: str) -> Component | None:
        rt, s = self.runtime, self.runtime.settings
        if name == "projector":
            from .projector import Projector

            return Projector(rt.log, rt.store)
        if name == "reconciler":
            from .reconciler import Reconciler

            return Reconciler(rt.log, rt.policy)
        if name == "probe":
            from .probe import Probe

            return Probe(rt.log, await rt.client())
        if name == "watchdog":
            from .watchdog import Watchdog

            projector = self.components.get("projector")
            return Watchdog(
                rt.log,
                rt.store,
                stale_after=s.stale_running_after,
                interval=s.watchdog_interval,
                batch_limit=s.watchdog_batch_limit,
                ready=projector.idle if projector is not None else None,
            )
        if name == "telemetry":
            if s.posthog_api_key is None:
                log.info("telemetry off: AUDITREC_POSTHOG_API_KEY is not set")
                return None
            from .telemetry import Telemetry

            return Telemetry(rt.log, rt.store, s)
        return None  # the api runs as a server, not a component

    async def start(self, *, wait: float = 0.0) -> None:
        """Build and start the components. With ``wait`` > 0, a retriable failure (a group
        coordinator not ready yet) stops what started and tries again with backoff."""
        if self.components:
            return

        async def build() -> None:
            for name in self.names:
                component = await self._build(name)
                if component is not None:
                    await component.start()
                    self.components[name] = component

        await retrying(build, self.stop, wait=wait, what="components not ready")

    async def stop(self) -> None:
        for component in reversed(list(self.components.values())):
            try:
                await component.stop()
            except Exception as exc:  # keep stopping the others
                log.warning("component stop failed", component=component.name, error=str(exc))
        self.components.clear()
        with contextlib.suppress(Exception):
            await self.runtime.store.forget_process(self.runtime.process_id)

    # -- running ----------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        names = list(self.components) + (["api"] if "api" in self.names else [])
        while not self.stopping.is_set():
            try:
                await self.runtime.store.heartbeat(
                    self.runtime.process_id, names, self.runtime.now()
                )
                for c in self.components.values():
                    if isinstance(c, LogConsumer):
                        CONSUMER_LAG.labels(c.group).set(await c.lag())
            except Exception as exc:
                log.warning("heartbeat failed", error=str(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), HEARTBEAT_EVERY)

    async def _loop(self, component: Component) -> None:
        backoff = 0.2
        while not self.stopping.is_set():
            try:
                handled = await component.step()
                backoff = 0.2
                if handled == 0 and not isinstance(component, LogConsumer):
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.stopping.wait(), 0.5)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.error(
                    "step failed; restarting component",
                    component=component.name,
                    error=str(exc),
                    retriable=getattr(exc, "retriable", False),
                    exc_info=not getattr(exc, "retriable", False),
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), backoff)
                backoff = min(backoff * 2, 30.0)
                with contextlib.suppress(Exception):
                    await component.stop()
                with contextlib.suppress(Exception):
                    await component.start()

    async def run(self, *, drain_timeout: float = 10.0) -> None:
        """Run until :attr:`stopping` is set (SIGINT/SIGTERM when installed)."""
        tasks = [asyncio.create_task(self._loop(c), name=c.name) for c in self.components.values()]
        tasks.append(asyncio.create_task(self._heartbeat_loop(), name="heartbeat"))
        if "api" in self.names:
            tasks.append(asyncio.create_task(self._serve_api(), name="api"))
        running = list(self.components) + (["api"] if "api" in self.names else [])
        log.info("serving", components=running, process=self.runtime.process_id)
        await self.stopping.wait()
        log.info("stopping: finishing the batches in hand")
        if self._api_server is not None:
            self._api_server.should_exit = True
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
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, self.stopping.set)

    async def drain(self, *, timeout: float = 120.0, quiet_rounds: int = 2) -> bool:
        """Step every log consumer until all are caught up and nothing moves; True if drained."""
        consumers = [c for c in self.components.values() if isinstance(c, LogConsumer)]
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
        """Drain, tick the watchdog once (if it runs here), drain again."""
        await self.runtime.store.heartbeat(
            self.runtime.process_id, list(self.components), self.runtime.now()
        )
        drained = await self.drain(timeout=timeout)
        watchdog = self.components.get("watchdog")
        if watchdog is not None:
            from .watchdog import Watchdog

            assert isinstance(watchdog, Watchdog)
            await watchdog.tick()
            drained = await self.drain(timeout=timeout) and drained
        return drained

    async def _serve_api(self) -> None:
        import uvicorn

        from .api_app import build_app

        s = self.runtime.settings
        app = build_app(self.runtime)
        config = uvicorn.Config(
            app,
            host=s.api_host,
            port=s.api_port,
            log_level="warning",
            log_config=None,
            lifespan="off",
        )
        self._api_server = uvicorn.Server(config)
        self._api_server.install_signal_handlers = lambda: None
        try:
            await self._api_server.serve()
        except (SystemExit, OSError) as exc:  # uvicorn exits when it cannot bind
            log.error(
                "api: cannot serve; the other components keep running",
                address=f"{s.api_host}:{s.api_port}",
                error=str(exc) or type(exc).__name__,
            )
