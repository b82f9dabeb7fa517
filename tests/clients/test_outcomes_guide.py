"""The receivers of docs/guides/outcomes.md: the Python one runs as written (in its own process,
it takes deliveries signed with the official ``standardwebhooks`` package over real HTTP,
applies each entry once however often it comes, and answers 401 to one not signed with its
secret); the Worker shown is an excerpt of ``clients/typescript/examples/outcome-worker.js``."""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from standardwebhooks import Webhook

from tests.consumers.api.conftest import free_port
from tests.eventually import eventually_sync

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "outcomes.md"
SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def _receiver_block() -> str:
    text = GUIDE.read_text()
    section = text[text.index("\n### A receiver in Python\n") + 1 :]
    section = re.split(r"\n##+ ", section, maxsplit=1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "expected one python block under ### A receiver in Python"
    return str(blocks[0])


def entry(n: int, audit: str = "a-1", kind: str = "audit.failed") -> dict[str, Any]:
    return {
        "id": f"out_{n:032x}", "type": kind, "audit_id": audit,
        "status": "completed" if kind == "audit.overturned" else "failed", "error_code": "oom",
        "rule": "errored", "reconciled_by": "watchdog", "actor": "reconciler",
        "decided_at": "2026-12-06T10:00:00.117000Z",
        "event_id": f"00000000-0000-4000-8000-{n:012x}",
    }  # fmt: skip


def signed(body: str, msg_id: str, secret: str = SECRET, age: float = 0) -> dict[str, str]:
    at = datetime.now(UTC) - timedelta(seconds=age)
    return {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, at, body),
    }


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    script = tmp_path / "receiver.py"
    script.write_text(_receiver_block())
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUDITREC_")}
    env |= {"AUDITREC_WEBHOOK_SECRET": SECRET, "PORT": str(port)}
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}/"

    def listening() -> bool:
        try:
            httpx.post(url, content=b"{}", timeout=1)  # unsigned: refused, but it answered
        except httpx.TransportError:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            return False
        return True

    try:
        eventually_sync(listening, interval=0.05, timeout=20, message="the receiver to listen")
        yield url, proc
    finally:
        proc.terminate()
        proc.wait(5)


def test_the_python_receiver_applies_each_entry_once_and_refuses_bad_signatures(
    receiver: tuple[str, subprocess.Popen[str]],
) -> None:
    url, proc = receiver
    first, second = entry(1), entry(2, audit="a-2", kind="audit.overturned")
    deliveries = [first, first, second, first]  # a redelivery, then another audit, then again
    with httpx.Client(timeout=5) as http:
        statuses = []
        for item in deliveries:
            body = json.dumps(item)
            statuses.append(http.post(url, content=body, headers=signed(body, item["id"])))
        body = json.dumps(entry(3))
        other = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
        refused = [http.post(url, content=body, headers=signed(body, entry(3)["id"], other))]
        refused.append(http.post(url, content=body.replace("oom", "cpu_limit"),
                                 headers=signed(body, entry(3)["id"])))  # fmt: skip
        refused.append(http.post(url, content=body, headers=signed(body, entry(3)["id"], age=600)))

    assert [r.status_code for r in statuses] == [204] * 4
    assert [r.status_code for r in refused] == [401] * 3
    proc.terminate()
    out, _ = proc.communicate(timeout=5)
    assert out.splitlines() == ["a-1 audit.failed failed", "a-2 audit.overturned completed"]


def test_the_worker_shown_is_an_excerpt_of_the_example_worker() -> None:
    text = GUIDE.read_text()
    (block,) = re.findall(r"```js\n(.*?)```", text, flags=re.S)
    example = (ROOT / "clients" / "typescript" / "examples" / "outcome-worker.js").read_text()
    lines = {line.strip() for line in example.splitlines()}
    missing = [line for line in block.splitlines() if line.strip() not in lines]
    assert missing == [], "lines of the guide's Worker that the example does not have"
