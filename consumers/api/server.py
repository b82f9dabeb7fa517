"""The HTTP API as a component: uvicorn serving :func:`~consumers.api.app.build_app` until the
supervisor interrupts it. A port that cannot be bound is logged once; the other components
keep running."""

from __future__ import annotations

import contextlib
from collections.abc import Generator

import structlog
import uvicorn

from consumers.api.app import build_app
from consumers.operations.operations import Operations
from consumers.runtime.component import Component

__all__ = ["ApiServer"]

log = structlog.get_logger("auditrec")


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield  # the supervisor owns SIGINT/SIGTERM and interrupts the server itself


class ApiServer(Component):
    name = "api"

    def __init__(self, ops: Operations) -> None:
        self.ops = ops
        self._server: uvicorn.Server | None = None
        self._served = False

    @property
    def serving(self) -> bool:
        """Accepting connections."""
        return self._server is not None and self._server.started

    async def start(self) -> None:
        if self._server is not None:
            return
        s = self.ops.rt.settings
        config = uvicorn.Config(
            build_app(self.ops),
            host=s.api_host,
            port=s.api_port,
            log_level="warning",
            log_config=None,
            lifespan="off",
        )
        server = _Server(config)
        self._server = server
        self._served = False

    async def stop(self) -> None:
        self.interrupt()
        self._server = None

    def interrupt(self) -> None:
        if self._server is not None:
            self._server.should_exit = True

    async def step(self) -> int:
        """Serve until interrupted (once: after the server returns, steps do nothing)."""
        server = self._server
        if server is None or self._served:
            return 0
        self._served = True
        s = self.ops.rt.settings
        try:
            await server.serve()
        except (SystemExit, OSError) as exc:  # uvicorn exits when it cannot bind
            log.error(
                "api: cannot serve; the other components keep running",
                address=f"{s.api_host}:{s.api_port}",
                error=str(exc) or type(exc).__name__,
            )
        return 0
