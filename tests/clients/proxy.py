"""A real TCP proxy in front of ``auditrec serve`` that can misbehave on the next requests.

- ``drop(n)``: the next ``n`` connections forward their request, wait until the server starts
  answering (so the request was handled: a publish was published), then close the client's
  connection without a byte of the answer. The client sees a dropped connection and cannot
  know whether its request took effect — the case a retried publish must survive.
- ``refuse(n, status)``: the next ``n`` connections are answered ``status`` by the proxy
  itself, with ``Retry-After: 0``, and nothing reaches the server.

Other connections are forwarded both ways unchanged. ``dropped`` keeps the first bytes of each
answer it swallowed, so a test can show the server did answer them.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType

__all__ = ["FaultyProxy"]


class FaultyProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        # Closing a socket does not wake a thread blocked in accept(): it looks up every 50 ms.
        self._listener.settimeout(0.05)
        self.port: int = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._faults: list[tuple[str, int]] = []
        self.dropped: list[bytes] = []
        self.refused = 0
        self._sockets: list[socket.socket] = []
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def drop(self, times: int = 1) -> None:
        with self._lock:
            self._faults.extend([("drop", 0)] * times)

    def refuse(self, times: int = 1, status: int = 503) -> None:
        with self._lock:
            self._faults.extend([("refuse", status)] * times)

    def __enter__(self) -> FaultyProxy:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._closed = True
        self._listener.close()
        for sock in list(self._sockets):
            with contextlib.suppress(OSError):
                sock.close()
        self._thread.join(timeout=5)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            self._sockets.append(client)
            with self._lock:
                fault = self._faults.pop(0) if self._faults else None
            threading.Thread(target=self._serve, args=(client, fault), daemon=True).start()

    def _serve(self, client: socket.socket, fault: tuple[str, int] | None) -> None:
        if fault is not None and fault[0] == "refuse":
            self._refuse(client, fault[1])
            return
        upstream = socket.create_connection(self.upstream)
        self._sockets.append(upstream)
        threading.Thread(target=_pump, args=(client, upstream), daemon=True).start()
        if fault is None:
            _pump(upstream, client)
            return
        first = upstream.recv(65536)  # the server has handled the request and answers
        self.dropped.append(first)
        with contextlib.suppress(OSError):
            client.shutdown(socket.SHUT_RDWR)
        client.close()
        upstream.close()

    def _refuse(self, client: socket.socket, status: int) -> None:
        with contextlib.suppress(OSError):
            client.recv(65536)  # the request's head, at least
            # Counted before it is sent: the client may act on it before this thread goes on.
            self.refused += 1
            body = b'{"detail": "refused by the test proxy"}'
            client.sendall(
                f"HTTP/1.1 {status} Refused\r\ncontent-type: application/json\r\n"
                f"retry-after: 0\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
                + body
            )
        client.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
