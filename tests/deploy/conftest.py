"""The tests of ``deploy/``: where its files are, and promtool (required like Kafka and
PostgreSQL: with ``CI`` or ``AUDITREC_REQUIRE_SERVICES=1`` a missing promtool fails)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.services import services_required

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


@pytest.fixture(scope="session")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is not None:
        return path
    message = (
        "promtool is not installed; install it with `make promtool` "
        "(`bash scripts/services.sh promtool`: Debian's prometheus package)"
    )
    if services_required():
        pytest.fail(
            f"{message} [services are required: CI or AUDITREC_REQUIRE_SERVICES=1]", pytrace=False
        )
    pytest.skip(message)
