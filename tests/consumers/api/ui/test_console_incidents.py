"""The incident banner over plain HTTP against a live API on each backend pair: the brake
engaged (through the store's brake port) on every page, with its release and discard previews
one click away for an operator and not for a reader; parked outcome deliveries; a failing
component; dead letters set aside in the last hour; a pipeline no serve runs; probing paused
by a 429 and blind without credentials; and no banner at all on the login page."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from consumers.eventlog.codec import dead_letter
from consumers.eventlog.port import Record
from consumers.operations.incidents import KEEP
from consumers.workflows.simulator.server import SimulatorServer
from tests.conftest import Backend
from tests.consumers.api.conftest import LiveServer, server_settings
from tests.consumers.api.ui.test_console_actions import form_of
from tests.consumers.api.ui.test_console_deliveries import parked
from tests.consumers.api.ui.test_console_http import csrf_of
from tests.eventually import eventually_sync

TOKENS = "admin:admin-secret-0001:operate,viewer:viewer-secret-0002:read"
PAGES = ("/ui", "/ui/audits", "/ui/dead-letters", "/ui/deliveries", "/ui/backtest")


@pytest.fixture
def live(backend: Backend, tmp_path: Path, simulator: SimulatorServer) -> Iterator[LiveServer]:
    settings = server_settings(
        tmp_path,
        simulator,
        event_log_url=backend.event_log_url,
        database_url=backend.database_url,
        topic_prefix=backend.topic_prefix,
        api_tokens=TOKENS,
        webhook_urls="https://hooks.example/in",
    )
    with LiveServer(["api"], **settings) as server:
        yield server


@contextmanager
def signed_in(live: LiveServer, token: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live.url, timeout=30) as client:
        login = client.get("/ui/login")
        assert 'role="alert"' not in login.text  # nothing is told before signing in
        signed = client.post("/ui/login", data={"token": token, "csrf": csrf_of(login.text)})
        assert signed.status_code == 303, signed.text
        yield client


def banner(page: str) -> dict[str, str]:
    """The banner's incidents: kind -> its text (tags removed)."""
    found = re.search(r'<section id="incidents"[^>]*role="alert"[^>]*>(.*?)</section>', page, re.S)
    if found is None:
        return {}
    return {
        kind: " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())
        for kind, body in re.findall(
            r'<li class="incident [a-z]+" data-kind="([a-z_]+)"[^>]*>(.*?)</li>',
            found.group(1),
            re.S,
        )
    }


def test_an_engaged_brake_is_on_every_page_with_its_previews_one_click_away(
    live: LiveServer,
) -> None:
    backends = live.backends
    assert backends is not None
    since = datetime(2026, 12, 6, 3, 4, 5, tzinfo=UTC)
    live.call(lambda: backends.store.brake.engage_brake("sweep-x", 40, 41, since))
    with signed_in(live, "admin-secret-0001") as admin:
        for path in PAGES:
            page = admin.get(path)
            assert page.status_code == 200, path
            shown = banner(page.text)
            assert "brake" in shown, path
            assert "Mass-failure brake engaged since 2026-12-06 03:04:05Z" in shown["brake"]
            # the banner comes before the page's own heading
            assert page.text.index('id="incidents"') < page.text.index("<h1"), path
        overview = admin.get("/ui").text
        action, fields = form_of(overview, "banner-release")
        assert action == "/ui/brake/release"
        preview = admin.post(action, data=fields)
        assert preview.status_code == 200 and "Preview: release held failures" in preview.text
        assert 'id="incidents"' not in preview.text  # a form's answer: the state before it
        confirm_action, confirm = form_of(preview.text, "confirm")
        done = admin.post(confirm_action, data=confirm)
        assert done.status_code == 200 and "Brake released" in done.text
        # the action forgot what was kept: the next page tells the brake is off
        assert "brake" not in banner(admin.get("/ui/audits").text)
    with signed_in(live, "viewer-secret-0002") as viewer:
        live.call(lambda: backends.store.brake.engage_brake("sweep-y", 40, 41, since))
        eventually_sync(
            lambda: "brake" in banner(viewer.get("/ui").text),
            timeout=KEEP * 3,
            interval=0.2,
            message="the banner to show the brake engaged again",
        )
        page = viewer.get("/ui").text
        assert 'id="banner-release"' not in page and 'id="banner-discard"' not in page


def test_parked_deliveries_a_failing_component_and_dead_letters_are_told(
    live: LiveServer,
) -> None:
    backends = live.backends
    assert backends is not None
    live.call(
        lambda: backends.store.deliveries.park(
            [parked("hook-a", 1, "a-1"), parked("hook-a", 2, "a-2")]
        )
    )
    boom = RuntimeError("the projection store refused the batch")
    for _ in range(3):
        backends.health.failed("audit-projector", boom)
    log = backends.log
    source = Record(log.topics.lifecycle, 0, 5, "a-bad", b"\xffnot json")
    live.call(lambda: log.append([dead_letter(log.topics, source, "audit-projector", "not JSON")]))
    with signed_in(live, "viewer-secret-0002") as viewer:
        page = viewer.get("/ui/audits").text
        shown = banner(page)
        assert "2 outcome delivery(ies) parked (hook-a 2)" in shown["parked"]
        assert "audit-projector: failing (3 steps in a row)" in shown["component"]
        assert "the projection store refused the batch" in shown["component"]
        assert "dead letter(s) set aside in the last hour" in shown["dead_letters"]
        assert "no running `auditrec serve` runs" in shown["pipeline"]  # only the API runs here
        assert "brake" not in shown
        # the most severe first, each a link to where it is acted on
        kinds = list(shown)
        assert kinds.index("component") < kinds.index("parked")
        assert 'href="/ui/deliveries"' in page and 'href="/ui/dead-letters"' in page


def test_probing_paused_by_a_429_then_blind_without_credentials_is_told(
    backend: Backend, tmp_path: Path, simulator: SimulatorServer
) -> None:
    with LiveServer(
        ["api"],
        **server_settings(
            tmp_path,
            simulator,
            event_log_url=backend.event_log_url,
            database_url=backend.database_url,
            topic_prefix=backend.topic_prefix,
            api_tokens=TOKENS,
        ),
    ) as live:
        backends = live.backends
        assert backends is not None
        live.call(lambda: backends.rate_limit().pause(120))  # as a Cloudflare 429 asks
        with signed_in(live, "viewer-secret-0002") as viewer:
            shown = banner(viewer.get("/ui").text)
            paused = shown["probe_paused"]
            assert re.search(r"Probing paused by a Cloudflare 429 for 1[12]\ds more", paused)
            assert "probe_blind" not in shown  # the simulator needs no token
    with (
        LiveServer(
            ["api"],
            **server_settings(
                tmp_path,
                simulator,
                event_log_url=backend.event_log_url,
                database_url=backend.database_url,
                topic_prefix=backend.topic_prefix,
                api_tokens=TOKENS,
                cloudflare_api_url="https://api.cloudflare.com/client/v4",
                cloudflare_api_token=None,
            ),
        ) as live,
        signed_in(live, "viewer-secret-0002") as viewer,
    ):
        shown = banner(viewer.get("/ui/deliveries").text)
        assert "Probing is blind" in shown["probe_blind"]
        assert "AUDITREC_CLOUDFLARE_API_TOKEN" in shown["probe_blind"]
