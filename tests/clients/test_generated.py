"""The clients' generated files are what their generators make of today's schemas: a change to
the event models that is not regenerated (clients/typescript/scripts/generate.sh,
clients/python/scripts/generate.sh) fails here, naming the file. What the schemas do not carry
(the audit statuses of the API's answers) is checked against the service instead."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from consumers.operations.listing import AUDIT_STATUSES
from statemachine.vocabulary import AUDIT_ID_PATTERN, AUDIT_ID_RULE, ERROR_CODES

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "typescript"
PYTHON_CLIENT = ROOT / "clients" / "python"
AUDITREC = str(Path(sys.executable).with_name("auditrec"))


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node (>= 20) is needed to generate the TypeScript client's types")
    return node


@pytest.fixture(scope="module")
def schemas(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Today's schemas, as ``auditrec schema --out`` writes them."""
    out = tmp_path_factory.mktemp("schemas")
    written = subprocess.run(
        [AUDITREC, "schema", "--out", str(out)], capture_output=True, text=True, timeout=120
    )
    assert written.returncode == 0, written.stderr
    return out


def _python_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "generate", PYTHON_CLIENT / "scripts" / "generate.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_checked_in_types_are_what_the_generator_makes_now(
    schemas: Path, tmp_path: Path
) -> None:
    # when the TypeScript generator runs on today's schemas
    out = tmp_path / "generated"
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
    assert f"new RegExp({json.dumps(AUDIT_ID_PATTERN)})" in (out / "schema.js").read_text()


def test_the_checked_in_python_vocabulary_is_what_the_generator_makes_now(
    schemas: Path, tmp_path: Path
) -> None:
    # when the Python generator runs on today's schemas
    out = tmp_path / "vocabulary.py"
    assert _python_generator().main([str(schemas), str(out)]) == 0

    # then it writes the module checked in, byte for byte, saying what the service says
    checked_in = PYTHON_CLIENT / "auditrec_client" / "vocabulary.py"
    assert out.read_text() == checked_in.read_text(), (
        "stale auditrec_client/vocabulary.py: run clients/python/scripts/generate.sh"
    )
    from auditrec_client import vocabulary

    assert vocabulary.AUDIT_ID_PATTERN == AUDIT_ID_PATTERN
    assert vocabulary.AUDIT_ID_RULE == AUDIT_ID_RULE
    assert vocabulary.ERROR_CODES == ERROR_CODES


def test_schemas_the_python_generator_cannot_read_stop_it_naming_what(
    schemas: Path, tmp_path: Path
) -> None:
    generator = _python_generator()
    # given today's schemas, one of them with an audit-id pattern of another shape
    shutil.copytree(schemas, tmp_path / "schemas")
    started = tmp_path / "schemas" / "publish" / "AuditStarted.json"
    schema = json.loads(started.read_text())
    schema["properties"]["audit_id"]["pattern"] = "^a+$"
    started.write_text(json.dumps(schema))

    # then reading them stops, naming the problem
    with pytest.raises(generator.SchemaError, match="audit_id pattern differs"):
        generator.read(tmp_path / "schemas")
    # and a pattern it cannot put in words stops it too
    for file in (tmp_path / "schemas" / "publish").iterdir():
        body = json.loads(file.read_text())
        body["properties"]["audit_id"]["pattern"] = "^a+$"
        file.write_text(json.dumps(body))
    with pytest.raises(generator.SchemaError, match=r"'\^a\+\$' is not"):
        generator.read(tmp_path / "schemas")


def test_the_typescript_clients_audit_statuses_are_the_services() -> None:
    declarations = (CLIENT / "src" / "index.d.ts").read_text()
    found = re.search(r"^export type AuditStatusName = (.+);$", declarations, re.MULTILINE)
    assert found is not None
    assert tuple(json.loads(s) for s in found[1].split(" | ")) == AUDIT_STATUSES
