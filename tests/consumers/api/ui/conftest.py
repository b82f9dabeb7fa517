"""What the console's tests run on: a real ``auditrec serve`` (all components, the API on a
port of its own) and Debian's headless Chromium driven through its chromedriver by Selenium.

Chromium is found at fixed paths and never downloaded (``bash scripts/services.sh browser``
installs it; ``make test`` does). When it is missing the browser tests fail if services are
required (CI, ``AUDITREC_REQUIRE_SERVICES=1``) and are skipped otherwise. Screenshots go to
the test's folder, and also to ``AUDITREC_SCREENSHOTS_DIR`` when set (``make screenshots``
refreshes ``docs/screenshots`` so).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from consumers.workflows.simulator.server import SimulatorServer
from tests.conftest import Backend
from tests.consumers.api.conftest import free_port
from tests.e2e.test_cli_e2e import AUDITREC
from tests.eventually import eventually_sync
from tests.services import services_required

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,1000",
)
TOKENS = "admin:admin-secret-0001:operate,viewer:viewer-secret-0002:read"


def _require_chromium() -> None:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if not missing:
        return
    message = (
        f"headless Chromium is not installed ({', '.join(missing)} missing); install it with "
        "`bash scripts/services.sh browser` (`make browser`)"
    )
    if services_required():
        pytest.fail(f"{message} [services are required: CI or AUDITREC_REQUIRE_SERVICES=1]")
    pytest.skip(message)


@pytest.fixture
def browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """A headless Chromium of the test's own (fresh profile), through /usr/bin/chromedriver:
    the driver's path is given, so Selenium Manager neither looks for nor downloads one."""
    _require_chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager: never fetch anything
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    service = Service(executable_path=str(CHROMEDRIVER), log_output=str(tmp_path / "driver.log"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(60)
    driver.implicitly_wait(10)  # a form post navigates after click() returns
    try:
        yield driver
    finally:
        driver.quit()


@dataclass
class Serve:
    url: str
    env: dict[str, str]
    process: subprocess.Popen[str]
    log: Path


TEST_REFRESH = 2  # AUDITREC_CONSOLE_REFRESH of the served console


@pytest.fixture
def console_env(backend: Backend, simulator: SimulatorServer) -> dict[str, str]:
    return backend.environ(
        AUDITREC_CLOUDFLARE_API_URL=simulator.url,
        AUDITREC_CLOUDFLARE_ACCOUNT_ID="acct-1",
        AUDITREC_CLOUDFLARE_API_TOKEN="cf-token",
        AUDITREC_SWEEP_WAIT="60s",
        AUDITREC_BRAKE_MIN_AUDITS="3",
        # The test's own sweep is the only tick: a watchdog's ticks fall on interval
        # boundaries of the wall clock, and a 5-minute one could land in the middle of the test.
        AUDITREC_WATCHDOG_INTERVAL="24h",
        AUDITREC_API_TOKENS=TOKENS,
        AUDITREC_API_PUBLIC_READYZ="1",  # the fixture waits on it without a token
        AUDITREC_API_PORT=str(free_port()),
        AUDITREC_METRICS_PORT="0",
        AUDITREC_LOG_FORMAT="json",
        # live pages read themselves again every TEST_REFRESH seconds (the least allowed)
        AUDITREC_CONSOLE_REFRESH=f"{TEST_REFRESH}s",
    )


@pytest.fixture
def serve(console_env: dict[str, str], tmp_path: Path) -> Iterator[Serve]:
    """``auditrec serve`` with every component, once ``/readyz`` says all are up."""
    assert subprocess.run([AUDITREC, "init"], env=console_env, timeout=120).returncode == 0
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [AUDITREC, "serve"], env=console_env, stdout=out, stderr=subprocess.STDOUT, text=True
        )
    url = f"http://127.0.0.1:{console_env['AUDITREC_API_PORT']}"

    def ready() -> bool:
        assert process.poll() is None, log.read_text()[-3000:]
        try:
            return httpx.get(f"{url}/readyz", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    try:
        eventually_sync(ready, timeout=120, interval=0.3, message="serve to be ready")
        yield Serve(url, console_env, process, log)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def screenshot(driver: object, tmp_path: Path, name: str, width: int = 1280) -> Path:
    """Save the page as ``name``.png in the test's folder (and in AUDITREC_SCREENSHOTS_DIR),
    in a window ``width`` px wide (wider if the page is)."""
    folder = tmp_path / "screenshots"
    folder.mkdir(exist_ok=True)
    path = folder / f"{name}.png"
    body = driver.find_element("tag name", "body")  # type: ignore[attr-defined]
    driver.set_window_size(width, 800)  # type: ignore[attr-defined]
    page_width = driver.execute_script("return document.documentElement.scrollWidth")  # type: ignore[attr-defined]
    height = driver.execute_script("return document.documentElement.scrollHeight")  # type: ignore[attr-defined]
    driver.set_window_size(max(width, page_width), min(max(800, height + 40), 4000))  # type: ignore[attr-defined]
    assert body.screenshot(str(path)), f"no screenshot of {name}"
    assert path.stat().st_size > 5000, f"{path} is nearly empty"
    wanted = os.environ.get("AUDITREC_SCREENSHOTS_DIR")
    if wanted:
        Path(wanted).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, Path(wanted) / path.name)
    return path
