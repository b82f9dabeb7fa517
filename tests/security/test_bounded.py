"""Slow and greedy clients against a real ``serve`` (DESIGN §10): connections that send
headers or bodies too slowly, or nothing, are answered 408 and closed at their deadline;
headers past the cap are 431; a connection past the cap is 503; failed authentications are
throttled per client (429 with ``Retry-After``), the console's sign-in too. Raw sockets, so
what a slow client sees on the wire is what is asserted."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.security.conftest import serving

TOKEN = "operator-token-0000000001"
HEADER_TIMEOUT = 2.0
BODY_TIMEOUT = 2.0
MAX_HEADER_BYTES = 4096
MAX_CONNECTIONS = 20
FAILURES = 5
PROXY = "127.0.0.5"  # an address whose X-Forwarded-* headers are believed
PROXIES = "127.0.1.0/24"  # and a network of them


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """``serve --only api`` with short deadlines and small caps; its (host, port)."""
    import os

    tmp = tmp_path_factory.mktemp("bounded")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUDITREC_")}
    env.update(
        AUDITREC_EVENT_LOG_URL=f"sqlite:///{tmp}/events.db",
        AUDITREC_DATABASE_URL=f"sqlite:///{tmp}/audits.db",
        AUDITREC_API_TOKENS=f"ops:{TOKEN}:operate",
        AUDITREC_API_HEADER_TIMEOUT=f"{HEADER_TIMEOUT:g}s",
        AUDITREC_API_BODY_TIMEOUT=f"{BODY_TIMEOUT:g}s",
        AUDITREC_API_MAX_HEADER_BYTES=str(MAX_HEADER_BYTES),
        AUDITREC_API_MAX_CONNECTIONS=str(MAX_CONNECTIONS),
        AUDITREC_API_AUTH_FAILURES_PER_MINUTE=str(FAILURES),
        AUDITREC_API_FORWARDED_ALLOW_IPS=f"{PROXY},{PROXIES}",
        AUDITREC_LOG_FORMAT="json",
    )
    with serving(env, tmp / "serve.log", "--only", "api", token=TOKEN) as url:
        host, port = url.removeprefix("http://").split(":")
        yield host, int(port)


def connect(api: tuple[str, int], source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(api, timeout=15, source_address=(source, 0))
    return sock


def until_closed(sock: socket.socket) -> tuple[bytes, float]:
    """Everything the server sends until it closes, and how long that took."""
    began = time.monotonic()
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks), time.monotonic() - began


def test_a_connection_that_sends_nothing_is_closed_at_the_header_deadline(
    api: tuple[str, int],
) -> None:
    with connect(api) as sock:
        answer, held = until_closed(sock)

    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"did not arrive within 2 s" in answer
    assert held >= HEADER_TIMEOUT - 0.2


def test_half_sent_headers_are_answered_408_and_closed_at_the_deadline(
    api: tuple[str, int],
) -> None:
    with connect(api) as sock:
        sock.sendall(b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        answer, held = until_closed(sock)

    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert held >= HEADER_TIMEOUT - 0.2


def test_headers_dripped_a_byte_at_a_time_get_no_more_than_the_deadline(
    api: tuple[str, int],
) -> None:
    request = b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200 + b"\r\n\r\n"
    began = time.monotonic()
    with connect(api) as sock:
        sock.settimeout(0.2)
        answer = b""
        for byte in request:  # one byte every 50 ms: 13 s for the whole, were it allowed
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
            with contextlib.suppress(TimeoutError):
                got = sock.recv(65536)
                if not got:
                    break
                answer += got
            time.sleep(0.05)  # the slow client's pace, not a wait for the server
        held = time.monotonic() - began

    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert held < HEADER_TIMEOUT + 2


def test_a_stalled_body_is_answered_408_and_closed_at_the_body_deadline(
    api: tuple[str, int],
) -> None:
    with connect(api) as sock:
        sock.sendall(
            b"POST /events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Authorization: Bearer {TOKEN}\r\n".encode()
            + b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n[{"type": '
        )
        answer, held = until_closed(sock)

    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert b"body did not arrive within 2 s" in answer
    assert held >= BODY_TIMEOUT - 0.2


def test_a_request_in_time_is_answered_and_its_connection_kept(api: tuple[str, int]) -> None:
    with connect(api) as sock:
        for pause in (0.0, HEADER_TIMEOUT + 0.5):  # idle between requests: keep-alive's 5 s
            time.sleep(pause)  # the client's pace
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            answer = b""
            while b'{"status":"ok"}' not in answer:
                got = sock.recv(65536)
                assert got, f"closed after {answer!r}"
                answer += got
            assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]


@pytest.mark.parametrize("pieces", [1, 8])
def test_headers_over_the_cap_are_431_whole_or_in_pieces(api: tuple[str, int], pieces: int) -> None:
    header = b"X-Big: " + b"b" * (2 * MAX_HEADER_BYTES) + b"\r\n"
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + header + b"\r\n"
    size = -(-len(request) // pieces)
    with connect(api) as sock:
        with contextlib.suppress(OSError):  # the server may close before the last piece
            for start in range(0, len(request), size):
                sock.sendall(request[start : start + size])
        answer, _ = until_closed(sock)

    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]


def test_a_connection_past_the_cap_is_503_at_once_and_the_cap_frees_up(
    api: tuple[str, int],
) -> None:
    held = [connect(api) for _ in range(MAX_CONNECTIONS)]
    try:
        with connect(api) as extra:
            answer, waited = until_closed(extra)
        assert answer.startswith(b"HTTP/1.1 503 "), answer[:200]
        assert waited < HEADER_TIMEOUT / 2  # refused at once, not at a deadline
    finally:
        for sock in held:
            sock.close()
    host, port = api

    def answered() -> int | None:
        try:
            return httpx.get(f"http://{host}:{port}/healthz", timeout=5).status_code
        except httpx.TransportError:
            return None

    from tests.eventually import eventually_sync

    assert eventually_sync(answered, until=lambda s: s == 200, message="a free slot") == 200


def client_from(api: tuple[str, int], source: str) -> httpx.Client:
    host, port = api
    transport = httpx.HTTPTransport(local_address=source)
    return httpx.Client(base_url=f"http://{host}:{port}", transport=transport, timeout=15)


def test_failed_bearer_tokens_are_throttled_per_client_with_retry_after(
    api: tuple[str, int],
) -> None:
    with client_from(api, "127.0.0.2") as guesser, client_from(api, "127.0.0.3") as other:
        guesses = [
            guesser.get("/audits", headers={"Authorization": f"Bearer guess-{n:020d}"})
            for n in range(FAILURES)
        ]
        held = guesser.get("/audits", headers={"Authorization": f"Bearer guess-{FAILURES}"})
        right = guesser.get("/audits", headers={"Authorization": f"Bearer {TOKEN}"})
        health = guesser.get("/healthz")
        elsewhere = other.get("/audits", headers={"Authorization": f"Bearer {TOKEN}"})

    assert [g.status_code for g in guesses] == [401] * FAILURES
    assert held.status_code == 429
    assert 1 <= int(held.headers["retry-after"]) <= 60 / FAILURES + 1
    assert "too many failed authentications" in held.json()["detail"]
    assert right.status_code == 429  # a guesser learns nothing while it waits
    assert health.status_code == 200
    assert elsewhere.status_code == 200  # another client is not held


def test_guessing_at_readyz_behind_the_token_is_throttled_too(api: tuple[str, int]) -> None:
    with client_from(api, "127.0.0.8") as guesser:
        guesses = [
            guesser.get("/readyz", headers={"Authorization": f"Bearer guess-{n:020d}"})
            for n in range(FAILURES)
        ]
        right = guesser.get("/readyz", headers={"Authorization": f"Bearer {TOKEN}"})
        health = guesser.get("/healthz")
        metrics = guesser.get("/metrics")

    assert [g.status_code for g in guesses] == [401] * FAILURES
    assert right.status_code == 429  # not 200 or 503: the right token is not told apart
    assert health.status_code == 200 and metrics.status_code == 200


def test_failed_console_sign_ins_are_throttled_too(api: tuple[str, int]) -> None:
    with client_from(api, "127.0.0.4") as guesser:
        form = guesser.get("/ui/login")
        csrf = _field(form.text, "csrf")
        tries = [
            guesser.post("/ui/login", data={"token": f"guess-{n}", "csrf": csrf, "next": "/ui"})
            for n in range(FAILURES + 1)
        ]

    assert [t.status_code for t in tries] == [401] * FAILURES + [429]
    assert "retry-after" in tries[-1].headers


def _field(html: str, name: str) -> str:
    marker = f'name="{name}" value="'
    start = html.index(marker) + len(marker)
    return html[start : html.index('"', start)]


def test_failures_through_a_listed_proxy_count_per_forwarded_client_and_only_then(
    api: tuple[str, int],
) -> None:
    wrong = {"Authorization": "Bearer guess-00000000000000000000"}

    def guess(client: httpx.Client, forwarded_for: str) -> int:
        headers = {**wrong, "X-Forwarded-For": forwarded_for}
        return client.get("/audits", headers=headers).status_code

    with client_from(api, PROXY) as proxy, client_from(api, "127.0.0.6") as direct:
        through = [guess(proxy, "198.51.100.1") for _ in range(FAILURES + 1)]
        neighbour = guess(proxy, "198.51.100.2")
        # a client that is no listed proxy cannot pose as many clients
        posing = [guess(direct, f"198.51.100.{10 + n}") for n in range(FAILURES + 1)]

    assert through == [401] * FAILURES + [429]
    assert neighbour == 401
    assert posing == [401] * FAILURES + [429]


def test_a_proxy_of_a_listed_network_is_believed_and_ipv6_clients_count_by_their_64(
    api: tuple[str, int],
) -> None:
    wrong = {"Authorization": "Bearer guess-00000000000000000000"}

    def guess(client: httpx.Client, forwarded_for: str) -> int:
        headers = {**wrong, "X-Forwarded-For": forwarded_for}
        return client.get("/audits", headers=headers).status_code

    with client_from(api, "127.0.1.9") as proxy:  # in PROXIES
        same_64 = [guess(proxy, f"2001:db8:1:2::{n + 1:x}") for n in range(FAILURES + 1)]
        next_64 = guess(proxy, "2001:db8:1:3::1")
        ipv4 = guess(proxy, "198.51.100.50")

    assert same_64 == [401] * FAILURES + [429]
    assert next_64 == 401
    assert ipv4 == 401  # the proxy itself is not the one counted


def test_the_console_cookie_is_secure_behind_a_listed_tls_proxy_only(
    api: tuple[str, int],
) -> None:
    https = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.7"}
    with client_from(api, PROXY) as proxy, client_from(api, "127.0.0.7") as direct:
        proxied = proxy.get("/ui/login", headers=https)
        faked = direct.get("/ui/login", headers=https)
        token = proxied.headers["set-cookie"].split("auditrec_login=", 1)[1].split(";", 1)[0]
        signed = proxy.post(
            "/ui/login",
            data={"token": TOKEN, "csrf": token, "next": "/ui"},
            headers={**https, "Cookie": f"auditrec_login={token}"},
        )

    assert "secure" in proxied.headers["set-cookie"].lower()
    assert "secure" not in faked.headers["set-cookie"].lower()
    assert signed.status_code == 303, signed.text[:300]
    session = [c for c in signed.headers.get_list("set-cookie") if "auditrec_console=" in c]
    assert session and "secure" in session[0].lower()
