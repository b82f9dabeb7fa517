"""Logging: the libraries' chatter (aiokafka, httpx, …) stays below WARNING unless DEBUG is
asked for; auditrec's own INFO lines pass."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from consumers.runtime.logs import configure_logging


@pytest.fixture(autouse=True)
def restore() -> Iterator[None]:
    yield
    configure_logging("INFO", "console")


@pytest.mark.parametrize(("level", "library_info_shown"), [("INFO", False), ("DEBUG", True)])
def test_library_noise_is_hidden_unless_debug_is_asked_for(
    level: str, library_info_shown: bool
) -> None:
    configure_logging(level, "json")
    assert logging.getLogger("aiokafka.consumer").isEnabledFor(logging.INFO) is library_info_shown
    assert logging.getLogger("httpx").isEnabledFor(logging.INFO) is library_info_shown
    assert logging.getLogger("aiokafka").isEnabledFor(logging.WARNING)
    assert logging.getLogger("auditrec").isEnabledFor(logging.INFO)
