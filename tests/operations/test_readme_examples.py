"""The README's examples are the real thing: its JSON Lines publish as they are, and every error
code it explains is one the classifier or the rules can give (and none is missing)."""

from __future__ import annotations

import re
from pathlib import Path

from consumers.operations.publishing import parse_json_lines
from statemachine.vocabulary import ERROR_CODES

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_json_lines_example_publishes_as_written() -> None:
    text = README.read_text()
    block = text.split("```json\n", 1)[1].split("```", 1)[0]
    events = parse_json_lines(block.splitlines())
    assert [e.type for e in events] == ["AuditStarted", "AuditProgressed", "AuditCompleted"]
    assert {e.audit_id for e in events} == {"a-123"}


def test_the_error_codes_table_names_every_code() -> None:
    text = README.read_text().split("### Error codes", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `([a-z_]+)` \|", text, flags=re.MULTILINE)
    assert sorted(documented) == sorted(ERROR_CODES)
