"""The README is the front door: short, and every link in it leads to a file of the repository
(the documentation site's own links are checked by ``mkdocs build --strict``, ``make docs``)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def test_the_readme_stays_a_front_door() -> None:
    assert len(README.read_text().splitlines()) <= 200


def test_every_relative_link_of_the_readme_leads_to_a_file() -> None:
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    relative = [t for t in targets if "://" not in t]
    assert "docs/architecture.md" in relative
    missing = [t for t in relative if not (ROOT / t).is_file()]
    assert missing == []


def test_the_readme_names_the_two_commands() -> None:
    text = README.read_text()
    assert "make demo" in text and "make test" in text
