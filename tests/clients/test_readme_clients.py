"""The client examples of the documentation (docs/guides/publishing.md, "Clients") run as
written against a real ``auditrec serve``: the Python block in a Python process, the JavaScript
block under Node with ``auditrec-client`` installed as a package would be and ``env`` the
process environment."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clients.conftest import Serve

ROOT = Path(__file__).resolve().parents[2]


def _block(language: str) -> str:
    text = (ROOT / "docs" / "guides" / "publishing.md").read_text()
    section = text[text.index("\n## Clients\n") + 1 :]
    section = re.split(r"\n##+ ", section, maxsplit=1)[0]  # up to the next heading
    blocks = re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, f"expected one {language} block under ## Clients"
    return str(blocks[0])


def _env(serve: Serve) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUDITREC_")}
    return env | {"AUDITREC_URL": serve.url, "AUDITREC_TOKEN": serve.token}


def test_the_python_example_runs_as_written(serve: Serve, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(_block("python"))

    ran = subprocess.run(
        [sys.executable, str(script)], env=_env(serve), capture_output=True, text=True, timeout=60
    )

    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == [
        "completed",
        "AuditStarted none -> running",
        "AuditProgressed running -> running",
        "AuditCompleted running -> completed",
    ]


def test_the_javascript_example_runs_as_written(serve: Serve, tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node (>= 20) is needed to run the TypeScript client's example")
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "auditrec-client").symlink_to(ROOT / "clients" / "typescript")
    script = tmp_path / "example.mjs"
    script.write_text("const env = process.env;\n" + _block("js"))

    ran = subprocess.run(
        [node, str(script)], env=_env(serve), capture_output=True, text=True, timeout=60
    )

    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == ["completed"]
