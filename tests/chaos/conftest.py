"""The chaos summaries are shown at the end of the pytest run (with or without ``-s``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

SUMMARIES = pytest.StashKey[list[str]]()


@pytest.fixture
def chaos_summary(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Record a run's summary, to be shown in the terminal summary."""

    def record(text: str) -> None:
        request.config.stash.setdefault(SUMMARIES, []).append(text)

    return record


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    for text in config.stash.get(SUMMARIES, []):
        terminalreporter.write_sep("-", "chaos summary")
        terminalreporter.write_line(text)
