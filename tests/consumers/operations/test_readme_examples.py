"""The documentation's examples are the real thing: the JSON Lines of "Publishing events"
publish as they are, and every error code "Operating" explains is one the classifier or the
rules can give (and none is missing)."""

from __future__ import annotations

import re
from pathlib import Path

from consumers.operations.publishing import parse_json_lines
from statemachine.vocabulary import ERROR_CODES

GUIDES = Path(__file__).resolve().parents[3] / "docs" / "guides"


def test_the_json_lines_example_publishes_as_written() -> None:
    text = (GUIDES / "publishing.md").read_text()
    block = text.split("```json\n", 1)[1].split("```", 1)[0]
    events = parse_json_lines(block.splitlines())
    assert [e.type for e in events] == ["AuditStarted", "AuditProgressed", "AuditCompleted"]
    assert {e.audit_id for e in events} == {"a-123"}


def test_the_error_codes_table_names_every_code() -> None:
    text = (GUIDES / "operating.md").read_text().split("\n## Error codes\n", 1)[1]
    text = text.split("\n## ", 1)[0]
    documented = re.findall(r"^\| `([a-z_]+)` \|", text, flags=re.MULTILINE)
    assert sorted(documented) == sorted(ERROR_CODES)
