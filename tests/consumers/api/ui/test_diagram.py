"""The state diagram is drawn from the transition table: every state once, the current one
marked, every trigger labelled; the table's rows leaving the current state are flagged."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from consumers.api.ui.diagram import state_svg, transition_rows
from statemachine.machine import STATES, TRANSITIONS

SVG = "{http://www.w3.org/2000/svg}"


@pytest.mark.parametrize("current", [*STATES, None])
def test_the_diagram_has_every_state_once_and_marks_the_current_one(current: str | None) -> None:
    root = ET.fromstring(state_svg(current))
    groups = root.findall(f"{SVG}g")
    assert sorted(g.get("data-state") for g in groups) == sorted(STATES)
    marked = [g.get("data-state") for g in groups if "current" in (g.get("class") or "")]
    assert marked == ([current] if current else [])


def test_every_transition_of_the_table_is_labelled() -> None:
    text = " ".join(t.text or "" for t in ET.fromstring(state_svg(None)).iter(f"{SVG}text"))
    for row in TRANSITIONS:
        assert re.search(rf"\b{row['trigger']}\b", text), row["trigger"]
        for condition in row.get("conditions", []):
            assert f"[{condition}]" in text


def test_the_rows_leaving_the_current_state_are_flagged() -> None:
    rows = transition_rows("failed")
    assert len(rows) == len(TRANSITIONS)
    leaving = {(r["trigger"], r["dest"]) for r in rows if r["from_current"]}
    assert leaving == {(t["trigger"], t["dest"]) for t in TRANSITIONS if t["source"] == "failed"}
    assert leaving  # a failed audit can still complete (an overturn) or be restored
