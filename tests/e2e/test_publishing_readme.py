"""The examples of the documentation's "Publishing events" (docs/guides/publishing.md) run as
written against a real ``auditrec serve``: its shell blocks (curl: a plain envelope, then
CloudEvents in structured and binary mode) and, on Kafka, its Python producer writing to the
ingest topic, which the ingest component validates onto the lifecycle; each audit they name is
then in the projection with the history they sent."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from consumers.workflows.simulator.server import SimulatorServer
from tests.conftest import Backend
from tests.e2e.serving import serve
from tests.eventually import eventually_sync

PUBLISHING = Path(__file__).resolve().parents[2] / "docs" / "guides" / "publishing.md"
DOCUMENTED_URL = "http://127.0.0.1:8080"


def blocks(language: str) -> list[str]:
    """The fenced ``language`` blocks of "Publishing events", in order (but those of
    "## Clients": tests/clients/test_readme_clients.py runs them)."""
    text = PUBLISHING.read_text()
    text = re.sub(r"\n## Clients\n.*?(?=\n## |\Z)", "\n", text, flags=re.DOTALL)
    return re.findall(rf"^```{language}\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)


@pytest.fixture
def env(backend: Backend, simulator: SimulatorServer) -> dict[str, str]:
    return backend.environ(
        AUDITREC_CLOUDFLARE_API_URL=simulator.url,
        AUDITREC_CLOUDFLARE_ACCOUNT_ID="acct-1",
        AUDITREC_LOG_FORMAT="json",
    )


def history(client: httpx.Client, audit_id: str, count: int) -> dict[str, Any]:
    found: dict[str, Any] = eventually_sync(
        lambda: client.get(f"/audits/{audit_id}/events").json(),
        until=lambda h: len(h.get("events", [])) == count,
        timeout=60,
        message=f"{count} events of {audit_id}",
    )
    return found


def test_the_publishing_examples_run_as_written(
    backend: Backend, env: dict[str, str], tmp_path: Path
) -> None:
    shell = blocks("sh")
    python = blocks("python")
    assert len(shell) == 2 and len(python) == 1
    with (
        serve(env, tmp_path / "serve.log", "api", "projector", "reconciler", "ingest") as url,
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        # the HTTP examples, as a user pastes them (only the port is this serve's)
        for block in shell:
            done = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", block.replace(DOCUMENTED_URL, url)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, done.stdout + done.stderr
            assert '"accepted":' in done.stdout, done.stdout
        steps = history(client, "a-200", 3)
        assert steps["status"] == "completed"
        assert [s["type"] for s in steps["events"]] == [
            "AuditStarted",
            "AuditProgressed",
            "AuditCompleted",
        ]
        assert steps["events"][1]["data"]["pages_crawled"] == 40

        # the Kafka producer, on the topic of this test's prefix
        if not backend.event_log_url.startswith("kafka://"):
            return
        bootstrap = backend.event_log_url.removeprefix("kafka://")
        code = (
            python[0]
            .replace('"127.0.0.1:9092"', f'"{bootstrap}"')
            .replace('"audit.ingest.v1"', f'"{backend.topic_prefix}.ingest.v1"')
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        direct = history(client, "a-300", 1)
        assert direct["status"] == "running"
        assert direct["events"][0]["producer"] == "crawler"
        row = client.get("/audits/a-300", params={"probe": "false"}).json()
        assert row["workflow_instance_id"] == "wf-a-300"
