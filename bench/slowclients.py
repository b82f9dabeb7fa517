"""Slow and greedy clients against a real ``auditrec serve --only api`` (embedded backends, one
token, the default limits unless given): how long each kind of slow client holds a connection,
the server's memory under many of them, and how many wrong tokens a client gets to try.

    python bench/slowclients.py [--connections 1000] [--guess-seconds 10]

Prints, for a connection that sends nothing, one that sends half its headers and one that
stalls in its body, the seconds until the server closed it and what it answered; the serve
process's RSS before, under ``--connections`` half-sent 15 KiB headers (all open at once) and
under 20 clients each sending an 8 MiB header; and the wrong bearer tokens answered 401 (tried)
and 429 (held) by one client sending them as fast as it can for ``--guess-seconds``.
Traffic goes to 127.0.0.1 only, and every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

AUDITREC = str(Path(sys.executable).with_name("auditrec"))
TOKEN = "bench-token-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def held(port: int, sent: bytes, limit: float = 120) -> tuple[float, bytes]:
    """Seconds until the server closes a connection that sent ``sent`` and then nothing."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    began = time.monotonic()
    if sent:
        writer.write(sent)
        await writer.drain()
    answer = await asyncio.wait_for(reader.read(), limit)
    writer.close()
    return time.monotonic() - began, answer.split(b"\r\n", 1)[0]


async def many(port: int, count: int, header: bytes, pid: int) -> tuple[float, int, int]:
    """Open ``count`` connections, each sending ``header`` (unfinished); the peak RSS while
    they are open, how many the server answered 503 at once, and how many 431."""
    writers = []
    refused = too_large = 0
    peak = rss_mib(pid)

    async def one() -> None:
        nonlocal refused, too_large
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            refused += 1
            return
        writers.append(writer)
        try:  # one past the cap is answered 503 at once, before it sends anything
            first = await asyncio.wait_for(reader.read(64), 0.2)
        except TimeoutError:
            pass
        else:
            refused += first.startswith(b"HTTP/1.1 503")
            return
        try:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            for start in range(0, len(header), 65536):
                writer.write(header[start : start + 65536])
                await writer.drain()
        except OSError:
            pass
        try:
            first = await asyncio.wait_for(reader.read(64), 0.5)
        except TimeoutError:
            return
        except OSError:  # closed, the answer lost to the reset of what we still sent
            too_large += len(header) > 65536
            return
        if first.startswith(b"HTTP/1.1 503"):
            refused += 1
        elif first.startswith(b"HTTP/1.1 431"):
            too_large += 1

    await asyncio.gather(*(one() for _ in range(count)))
    for _ in range(10):  # the peak while they are all held (the header deadline is 10 s)
        peak = max(peak, rss_mib(pid))
        await asyncio.sleep(0.2)
    for writer in writers:
        writer.close()
    return peak, refused, too_large


def guesses(url: str, seconds: float) -> tuple[int, int, float]:
    tried = held_ = 0
    began = time.monotonic()
    with httpx.Client(base_url=url, timeout=10) as client:
        n = 0
        while time.monotonic() - began < seconds:
            n += 1
            status = client.get("/audits", headers={"Authorization": f"Bearer guess-{n:024d}"})
            if status.status_code == 401:
                tried += 1
            elif status.status_code == 429:
                held_ += 1
    return tried, held_, time.monotonic() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--guess-seconds", type=float, default=10.0)
    args = parser.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AUDITREC_")}
        env.update(
            AUDITREC_EVENT_LOG_URL=f"sqlite:///{tmp}/events.db",
            AUDITREC_DATABASE_URL=f"sqlite:///{tmp}/audits.db",
            AUDITREC_API_TOKENS=f"bench:{TOKEN}:operate",
            AUDITREC_API_PORT=str(port),
            AUDITREC_LOG_LEVEL="ERROR",
        )
        process = subprocess.Popen([AUDITREC, "serve", "--only", "api"], env=env)
        try:
            for _ in range(600):
                try:
                    if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.1)
            auth = {"Authorization": f"Bearer {TOKEN}"}
            print(f"serve ready, RSS {rss_mib(process.pid):.1f} MiB")
            httpx.get(f"{url}/audits", headers=auth, timeout=10)

            async def slow() -> None:
                body = (
                    b"POST /events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    + f"Authorization: Bearer {TOKEN}\r\n".encode()
                    + b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n[{"
                )
                cases = {
                    "silent connection": b"",
                    "half-sent headers": b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: ",
                    "stalled body": body,
                }
                for name, sent in cases.items():
                    seconds, line = await held(port, sent)
                    print(f"{name}: closed after {seconds:.2f} s, answered {line.decode()!r}")
                before = rss_mib(process.pid)
                peak, refused, too_large = await many(
                    port, args.connections, b"h" * 15_000, process.pid
                )
                print(
                    f"{args.connections} connections with half-sent 15 KB headers: RSS "
                    f"{before:.1f} -> {peak:.1f} MiB (+{peak - before:.1f}); "
                    f"{refused} refused 503 (past the connection cap)"
                )
                await asyncio.sleep(11)  # the header deadline closes them
                before = rss_mib(process.pid)
                peak, refused, too_large = await many(port, 20, b"h" * (8 << 20), process.pid)
                print(
                    f"20 connections sending 8 MiB headers: RSS {before:.1f} -> {peak:.1f} MiB "
                    f"(+{peak - before:.1f}); {too_large} answered 431"
                )

            asyncio.run(slow())
            tried, held_, spent = guesses(url, args.guess_seconds)
            print(
                f"wrong tokens from one client for {spent:.1f} s: {tried} answered 401 "
                f"(tried), {held_} answered 429 (held); {tried / spent:.2f} guesses/s"
            )
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)


if __name__ == "__main__":
    main()
