"""The TypeScript client's generated types are what its generator makes of today's schemas:
a change to the event models that is not regenerated (clients/typescript/scripts/generate.sh)
fails here, naming the file."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "typescript"
AUDITREC = str(Path(sys.executable).with_name("auditrec"))


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node (>= 20) is needed to generate the TypeScript client's types")
    return node


def test_the_checked_in_types_are_what_the_generator_makes_now(tmp_path: Path) -> None:
    # given today's schemas
    schemas, out = tmp_path / "schemas", tmp_path / "generated"
    written = subprocess.run(
        [AUDITREC, "schema", "--out", str(schemas)], capture_output=True, text=True, timeout=120
    )
    assert written.returncode == 0, written.stderr

    # when the generator runs on them
    generated = subprocess.run(
        [_node(), str(CLIENT / "scripts" / "generate-types.mjs"), str(schemas), str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert generated.returncode == 0, generated.stderr

    # then it writes exactly the files checked in, byte for byte
    checked_in = CLIENT / "src" / "generated"
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(p.name for p in checked_in.iterdir())
    stale = [n for n in names if (out / n).read_bytes() != (checked_in / n).read_bytes()]
    assert not stale, f"stale {stale}: run clients/typescript/scripts/generate.sh"
    assert "export interface AuditStarted {" in (out / "events.d.ts").read_text()
