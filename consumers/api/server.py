"""The HTTP API as a component: uvicorn serving :func:`~consumers.api.app.build_app` until the
supervisor interrupts it. The socket is bound when the component starts, so a port in use
fails ``serve`` at once (exit 1, naming the address and the setting) rather than leaving a
process without its API."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Generator

import structlog
import uvicorn

from consumers.api.app import build_app
from consumers.api.bounded import Limits, bounded_protocol
from consumers.api.shutdown import Closing
from consumers.operations.service import Operations
from consumers.runtime.component import Component
from statemachine.errors import AuditrecError

__all__ = ["ApiServer"]

log = structlog.get_logger("auditrec")
GRACE = 8  # seconds in-flight requests get once shutdown begins
KEEP_ALIVE = 5  # seconds an idle keep-alive connection stays open (uvicorn's default)


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield  # the supervisor owns SIGINT/SIGTERM and interrupts the server itself


class ApiServer(Component):
    name = "api"

    def __init__(self, ops: Operations) -> None:
        self.ops = ops
        self._server: uvicorn.Server | None = None
        self._closing = Closing()
        self._socket: socket.socket | None = None
        self._served = False

    @property
    def serving(self) -> bool:
        """Accepting connections."""
        return self._server is not None and self._server.started

    async def start(self) -> None:
        if self._server is not None:
            return
        s = self.ops.backends.settings
        self._closing = Closing()
        config = uvicorn.Config(
            build_app(self.ops, self._closing),
            host=s.api_host,
            port=s.api_port,
            log_level="warning",
            log_config=None,
            lifespan="off",
            # In-flight requests get this long once shutdown begins (the supervisor drains
            # for 10 s); then they are cut, answered 503.
            timeout_graceful_shutdown=GRACE,
            # Bounded connections (consumers.api.bounded): header and body deadlines, the
            # header cap (431), the connection cap (503); idle keep-alive closed after 5 s.
            http=bounded_protocol(
                Limits(
                    header_timeout=s.api_header_timeout.total_seconds(),
                    body_timeout=s.api_body_timeout.total_seconds(),
                    max_header_bytes=s.api_max_header_bytes,
                    max_connections=s.api_max_connections,
                )
            ),
            h11_max_incomplete_event_size=s.api_max_header_bytes,
            timeout_keep_alive=KEEP_ALIVE,
            # X-Forwarded-For/-Proto believed from these proxies only: the real client for the
            # failed-authentication throttle, https for the console cookie's Secure.
            proxy_headers=True,
            forwarded_allow_ips=_proxies(s.api_forwarded_allow_ips),
        )
        self._socket = _bind(s.api_host, s.api_port)
        server = _Server(config)
        self._server = server
        self._served = False
        log.info("api", url=f"http://{s.api_host}:{self._socket.getsockname()[1]}")

    async def stop(self) -> None:
        self.interrupt()
        self._server = None
        sock, self._socket = self._socket, None
        if sock is not None and not self._served:
            sock.close()  # never handed to the server, which closes its own

    def interrupt(self) -> None:
        self._closing.closing = True
        if self._server is not None:
            self._server.should_exit = True

    async def step(self) -> int:
        """Serve until interrupted (once: after the server returns, steps do nothing)."""
        server = self._server
        if server is None or self._served:
            return 0
        self._served = True
        sockets = [self._socket] if self._socket is not None else None
        await server.serve(sockets=sockets)
        return 0


def _proxies(setting: str) -> list[str] | str:
    """``AUDITREC_API_FORWARDED_ALLOW_IPS`` as uvicorn reads it: ``*`` alone trusts any (in a
    list uvicorn would take it for a name), else the addresses and networks."""
    entries = [entry.strip() for entry in setting.split(",")]
    return "*" if "*" in entries else entries


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY on the connections of a TCP socket only
    # (without it every small answer waits ~40 ms for a delayed ACK).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise AuditrecError(
            f"api: cannot listen on {host}:{port} ({exc.strerror or exc}): set "
            "AUDITREC_API_PORT or `serve --port` to a free port, or leave the API out "
            "(`serve --only …`)"
        ) from None
    sock.set_inheritable(True)
    return sock
