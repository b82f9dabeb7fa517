"""Without Chromium a browser test fails when services are required, and skips otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.consumers.api.ui import conftest


def test_a_missing_chromium_fails_the_test_when_services_are_required(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(conftest, "CHROMIUM", tmp_path / "no-chromium")
    monkeypatch.setenv("AUDITREC_REQUIRE_SERVICES", "1")
    with pytest.raises(pytest.fail.Exception, match=r"scripts/services\.sh browser"):
        conftest._require_chromium()
    monkeypatch.delenv("AUDITREC_REQUIRE_SERVICES")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="not installed"):
        conftest._require_chromium()
