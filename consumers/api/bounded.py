"""The API's connections, bounded (DESIGN §10): uvicorn's h11 protocol with the limits it
lacks, so a slow or greedy client holds a connection and memory for a set time only.

uvicorn closes an idle keep-alive connection (``timeout_keep_alive``) and can cap the request
line and headers (``h11_max_incomplete_event_size``), but it has no deadline for a request's
headers or body: a connection that sends nothing, half its headers or half its body stays
open until the client leaves. :func:`bounded_protocol` adds, per connection:

- a header deadline (``AUDITREC_API_HEADER_TIMEOUT``) from the connection, or from the first
  byte of a request after the previous one, to the end of its headers: 408, then closed;
- a body deadline (``AUDITREC_API_BODY_TIMEOUT``) from the end of the headers to the end of
  the body: 408 (when nothing was answered yet), then closed;
- 431 for a request line and headers over ``AUDITREC_API_MAX_HEADER_BYTES``, whether they
  come in pieces (h11 stops buffering there) or all at once (counted before the app runs);
- at most ``AUDITREC_API_MAX_CONNECTIONS`` connections: one more is answered 503 and closed.

h11 is the parser (uvicorn's ``httptools`` protocol has no header cap and its internals differ).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import h11
from starlette.requests import ClientDisconnect
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["Limits", "bounded_protocol", "header_bytes"]


@dataclass(frozen=True)
class Limits:
    header_timeout: float  # seconds
    body_timeout: float  # seconds
    max_header_bytes: int
    max_connections: int


def _answer(status: int, reason: str, text: str, *extra: str) -> bytes:
    body = text.encode()
    head = [
        f"HTTP/1.1 {status} {reason}",
        "content-type: text/plain; charset=utf-8",
        f"content-length: {len(body)}",
        "connection: close",
        *extra,
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def header_bytes(scope: Any) -> int:
    """The size of a request's line and headers as sent (near enough: separators counted)."""
    line = len(scope["method"]) + len(scope["raw_path"]) + len(scope["query_string"]) + 12
    return line + sum(len(name) + len(value) + 4 for name, value in scope["headers"])


def bounded_protocol(limits: Limits) -> type[H11Protocol]:
    """uvicorn's h11 protocol under ``limits`` (pass it as ``Config(http=...)``)."""

    too_large_text = (
        f"the request line and headers may take {limits.max_header_bytes} bytes at most"
    )
    too_large = _answer(431, "Request Header Fields Too Large", too_large_text)
    headers_late = _answer(
        408,
        "Request Timeout",
        f"the request's headers did not arrive within {limits.header_timeout:g} s",
    )
    body_late = _answer(
        408,
        "Request Timeout",
        f"the request's body did not arrive within {limits.body_timeout:g} s",
    )
    full = _answer(
        503,
        "Service Unavailable",
        f"the API holds {limits.max_connections} connections, its most: try again shortly",
        "retry-after: 1",
    )

    class BoundedH11Protocol(H11Protocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            inner = self.app

            async def capped(scope: Any, receive: Any, send: Any) -> None:
                if scope["type"] == "http" and header_bytes(scope) > limits.max_header_bytes:
                    await send(
                        {
                            "type": "http.response.start",
                            "status": 431,
                            "headers": [
                                (b"content-type", b"text/plain; charset=utf-8"),
                                (b"connection", b"close"),
                            ],
                        }
                    )
                    await send({"type": "http.response.body", "body": too_large_text.encode()})
                    return
                # The client left, or its body was cut at the deadline: no one to answer.
                with contextlib.suppress(ClientDisconnect):
                    await inner(scope, receive, send)

            self.app = capped
            self._deadline: asyncio.TimerHandle | None = None
            self._phase = "headers"  # headers, body, app (answering), idle (between requests)
            self._current: object = None  # the request-response cycle seen last

        # -- deadlines --

        def _arm(self, seconds: float, late: bytes) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(seconds, self._late, late)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _late(self, answer: bytes) -> None:
            self._deadline = None
            if self.transport.is_closing():
                return
            cycle = self.cycle
            if cycle is not None and self._phase == "body":
                if cycle.response_started:
                    answer = b""  # the app answered already: just close
                cycle.disconnected = True  # the app's reads end, its writes go nowhere
            self.transport.write(answer)
            self.transport.close()

        # -- uvicorn's protocol --

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                self._phase = "refused"
                transport.write(full)
                transport.close()
                return
            self._arm(limits.header_timeout, headers_late)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._phase == "refused":
                return
            if self._phase == "idle":  # a new request's first bytes
                self._phase = "headers"
                self._arm(limits.header_timeout, headers_late)
            if self._phase == "headers" and self._over_cap(data):
                self._too_large()
                return
            super().data_received(data)

        def _over_cap(self, data: bytes) -> bool:
            """Whether the headers so far and ``data`` pass the cap with no end in sight."""
            buffered, _ = self.conn.trailing_data
            if len(buffered) + len(data) <= limits.max_header_bytes:
                return False
            return b"\r\n\r\n" not in (buffered + data)[: limits.max_header_bytes + 4]

        def _too_large(self) -> None:
            self._disarm()
            self._phase = "refused"
            self.transport.write(too_large)
            self.transport.close()

        def handle_events(self) -> None:
            super().handle_events()
            self._follow()

        def _follow(self) -> None:
            cycle = self.cycle
            if cycle is not None and cycle is not self._current:  # a request's headers are in
                self._current = cycle
                self._phase = "body"
                self._arm(limits.body_timeout, body_late)
            if self._phase == "body" and cycle is not None:
                if not cycle.more_body:
                    self._phase = "app"
                    self._disarm()
                elif cycle.response_complete and self.conn.their_state is h11.IDLE:
                    self._phase = "idle"  # answered early; the rest of the body came after
                    self._disarm()

        def on_response_complete(self) -> None:
            if self._phase != "body" or self.conn.their_state is h11.DONE:
                self._phase = "idle"  # uvicorn's keep-alive timeout closes an idle connection
                self._disarm()
            super().on_response_complete()

        def send_400_response(self, msg: str) -> None:
            buffered, _ = self.conn.trailing_data
            if self._phase == "headers" and len(buffered) > limits.max_header_bytes:
                self._too_large()
                return
            super().send_400_response(msg)

    return BoundedH11Protocol
