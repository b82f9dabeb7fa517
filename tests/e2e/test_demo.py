"""``auditrec demo`` (``make demo``) as a user runs it: the sweep's story (a probe that really
fails, counted and deciding nothing), then a death the event subscription's queue reports,
detected in seconds, and a final count that agrees with the final table. With ``--serve``
(``make demo-serve``) it keeps running: the API and the console on the demo's audits, reached
with the token it printed once, until SIGINT or SIGTERM."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.consumers.api.conftest import free_port
from tests.consumers.api.ui.test_console_http import csrf_of
from tests.e2e.serving import AUDITREC

DEMO_AUDITS = 12  # the scenario's eleven and demo-live


def _environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("AUDITREC_")}


def _table(text: str, title: str) -> dict[str, list[str]]:
    """The rows of the table printed under ``title``: audit id → its cells."""
    lines = text.splitlines()
    start = lines.index(title) + 2  # the title, then the header
    rows = {}
    for line in lines[start:]:
        if not line.startswith("demo-"):
            break
        cells = line.split()
        rows[cells[0]] = cells[1:]
    return rows


def test_the_demo_tells_its_story_and_detects_a_death_from_the_queue_in_seconds(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [AUDITREC, "demo", "--dir", str(tmp_path / "demo")],
        env=_environ() | {"COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr[-2000:]
    text = " ".join(done.stdout.split())  # the console wraps long lines at its width
    assert "demo-finalize is now completed, overturned=True" in text
    detected = re.search(
        r"demo-live killed by OOM: detected from the event subscription in (\d+\.\d) s "
        r"\(failed, oom, reconciled_by subscription; Workflows API requests to confirm it: 1\)",
        text,
    )
    assert detected, done.stdout[-3000:]
    assert 0 < float(detected.group(1)) < 10
    pushed = re.search(
        r"the product's webhook received (\d+) signed outcomes \((.*?)\), every signature "
        r"valid; the last: demo-live failed oom",
        text,
    )
    assert pushed, done.stdout[-3000:]
    # every failure the demo made, and the overturn of demo-finalize's
    assert "audit.overturned 1" in pushed.group(2) and "audit.failed" in pushed.group(2)
    assert int(pushed.group(1)) >= 3


def test_the_failing_probe_is_counted_and_the_final_count_agrees_with_the_table(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [AUDITREC, "demo", "--dir", str(tmp_path / "demo")],
        env=_environ() | {"COLUMNS": "200"},  # wide enough for the tables' rows
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr[-2000:]
    text = " ".join(done.stdout.split())
    # demo-flaky's instance: the API answers 500; the sweep counts it and decides nothing
    assert "probe errors 1 (server_error 1: nothing is decided on a failed probe)" in text
    swept = _table(done.stdout, "after the sweep")
    assert swept["demo-flaky"][:3] == ["running", "crawl", "probe_failed"]
    ended = _table(done.stdout, "as it ends")
    assert len(ended) == DEMO_AUDITS
    failed = sorted(audit for audit, cells in ended.items() if cells[0] == "failed")
    counted = re.search(r"(\d+) dead audits failed with a classified code \(([^)]*)\)", text)
    assert counted, done.stdout[-3000:]
    assert int(counted.group(1)) == len(failed) == 7, failed
    codes = sorted(ended[a][2] for a in failed)
    said = sorted(
        c for c, n in (p.split() for p in counted.group(2).split(", ")) for _ in range(int(n))
    )
    assert said == codes
    assert ended["demo-finalize"][:2] == ["completed", "(overturned)"]
    assert "1 failure overturned by a late completion" in text


class _Lines:
    """A process's stdout read line by line on a thread, so a test can wait for a line."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        assert process.stdout is not None
        stream = process.stdout

        def read() -> None:
            for line in stream:
                self._queue.put(line)
            self._queue.put(None)

        threading.Thread(target=read, daemon=True).start()

    def rest(self, timeout: float = 30.0) -> list[str]:
        """Every line, once the stream has ended."""
        while (line := self._queue.get(timeout=timeout)) is not None:
            self.seen.append(line)
        return self.seen

    def until(self, pattern: str, timeout: float = 120.0) -> re.Match[str]:
        while True:
            try:
                line = self._queue.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no {pattern!r} in: {''.join(self.seen)[-3000:]}") from None
            if line is None:
                raise AssertionError(f"exited before {pattern!r}: {''.join(self.seen)[-3000:]}")
            self.seen.append(line)
            if found := re.search(pattern, line):
                return found


@pytest.fixture
def demo_serving(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], _Lines, int]]:
    port = free_port()
    process = subprocess.Popen(
        [AUDITREC, "demo", "--serve", "--port", str(port), "--dir", str(tmp_path / "demo")],
        env=_environ() | {"COLUMNS": "200"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield process, _Lines(process), port
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_demo_serve_leaves_the_console_on_the_demos_audits_until_stopped(
    demo_serving: tuple[subprocess.Popen[str], _Lines, int], stop: signal.Signals
) -> None:
    process, lines, port = demo_serving
    console = lines.until(r"console\s+(http://\S+)").group(1)
    token = lines.until(r"token\s+(\S+)\s+\(scope operate").group(1)
    base = f"http://127.0.0.1:{port}"
    assert console == f"{base}/ui"

    with httpx.Client(base_url=base, timeout=30) as http:
        assert http.get("/audits").status_code == 401  # the token is needed
        failed = http.get(
            "/audits", params={"status": "failed"}, headers={"Authorization": f"Bearer {token}"}
        )
        assert failed.status_code == 200, failed.text
        ids = {a["audit_id"] for a in failed.json()["audits"]}
        assert {"demo-oom", "demo-live", "demo-expired"} <= ids and len(ids) == 7
        # the newcomer's way in: the console's sign-in with the printed token, then the list
        signed = http.post(
            "/ui/login", data={"token": token, "csrf": csrf_of(http.get("/ui/login").text)}
        )
        assert signed.status_code == 303, signed.text
        page = http.get("/ui/audits")
        assert page.status_code == 200 and "demo-oom" in page.text

    process.send_signal(stop)
    assert process.wait(timeout=60) == 0, "".join(lines.seen)[-3000:]
    assert sum(token in line for line in lines.rest()) == 1  # shown once, never logged
