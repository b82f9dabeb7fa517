"""The core does no I/O (DESIGN §1, STYLE "The core"): checked on the running interpreter and on
the source itself.

``pydantic`` (and ``uuid``) pull in ``socket``, ``random`` and ``time`` on their own, so those
are checked on our source with ``ast``; the I/O stacks that nothing should drag in are checked
in a fresh interpreter.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "statemachine"
SOURCES = sorted(PACKAGE.glob("*.py"))

NEVER_LOADED = {"asyncio", "sqlite3", "httpx", "aiokafka", "asyncpg", "posthog", "fastapi"}
NEVER_IMPORTED = NEVER_LOADED | {
    "socket",
    "time",
    "random",
    "secrets",
    "os",
    "pathlib",
    "io",
    "subprocess",
    "threading",
    "urllib",
    "http",
    "requests",
    "logging",
    "structlog",
    "consumers",
    "projections",
}
# Calls that read the clock, the environment or entropy, or do I/O.
IMPURE_ATTRIBUTES = {"now", "utcnow", "today", "uuid1", "uuid4", "getenv", "environ", "urandom"}
IMPURE_BUILTINS = {"open", "print", "input"}


def _fresh_import(code: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT.parent,  # not the project: the import must resolve through the install
        check=True,
    )
    return json.loads(result.stdout)


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_the_package_has_sources_to_check() -> None:
    assert {p.name for p in SOURCES} >= {
        "__init__.py",
        "events.py",
        "machine.py",
        "state.py",
        "rules.py",
        "classifier.py",
        "policy.py",
        "explain.py",
    }


def test_importing_the_core_loads_no_io_stack() -> None:
    # given a fresh interpreter
    # when it imports only statemachine
    loaded = _fresh_import(
        "import json, sys\n"
        "before = set(sys.modules)\n"
        "import statemachine\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in set(sys.modules) - before})))\n"
    )

    # then no I/O stack came along
    assert "statemachine" in loaded
    assert NEVER_LOADED.isdisjoint(loaded), sorted(NEVER_LOADED & set(loaded))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_the_core_source_imports_no_io_clock_or_randomness(path: Path) -> None:
    top_level = {name.split(".")[0] for name in _imported_modules(path)}

    assert NEVER_IMPORTED.isdisjoint(top_level), sorted(NEVER_IMPORTED & top_level)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_the_core_source_reads_no_clock_environment_or_entropy(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))

    attributes = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    called = {
        n.func.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    imported_names = {
        alias.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for alias in n.names
    }

    assert IMPURE_ATTRIBUTES.isdisjoint(attributes), sorted(IMPURE_ATTRIBUTES & attributes)
    assert IMPURE_BUILTINS.isdisjoint(called), sorted(IMPURE_BUILTINS & called)
    assert IMPURE_ATTRIBUTES.isdisjoint(imported_names)


def test_the_core_imports_only_itself_pydantic_transitions_and_the_standard_library() -> None:
    third_party = set()
    for path in SOURCES:
        for name in _imported_modules(path):
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top != "__future__":
                third_party.add(top)

    assert third_party <= {"statemachine", "pydantic", "transitions"}


def test_import_statemachine_is_this_project_not_python_statemachine() -> None:
    found = _fresh_import(
        "import json, statemachine\n"
        "print(json.dumps({'file': statemachine.__file__,"
        " 'api': sorted(n for n in ('evolve', 'fold', 'decide', 'StateMachine')"
        " if hasattr(statemachine, n))}))\n"
    )

    assert Path(found["file"]).resolve() == PACKAGE / "__init__.py"
    assert found["api"] == ["decide", "evolve", "fold"]


def test_the_running_tests_use_this_projects_statemachine() -> None:
    import statemachine

    assert Path(statemachine.__file__).resolve().parent == PACKAGE
    with pytest.raises(metadata.PackageNotFoundError):
        metadata.distribution("python-statemachine")
