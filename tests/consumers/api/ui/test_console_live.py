"""The console's live pages and failure charts: the overview charts failures per hour by code
over 24 h and 7 d (server-rendered, linking into the list); the overview and the lists read
themselves again in a real Chromium against a real ``auditrec serve`` (both backend pairs), so a
newly failed audit (or dead letter) shows without a reload, and they stop while paused or while
a form holds input."""

from __future__ import annotations

import asyncio
import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from consumers.api.ui.render import REFRESH_SECONDS
from consumers.workflows.simulator.server import SimulatorServer
from tests.consumers.api.conftest import (
    API_AND_PIPELINE,
    LiveServer,
    envelope,
    publish,
    server_settings,
    started,
    wait_for,
)
from tests.consumers.api.ui.conftest import Serve, screenshot
from tests.consumers.api.ui.dataset import append_poison
from tests.consumers.api.ui.driving import figures, sign_in, text_of
from tests.e2e.test_cli_e2e import AUDITREC
from tests.e2e.test_cli_e2e import envelope as line
from tests.eventually import eventually_sync

LIVE_PAGES = ("/ui", "/ui/audits", "/ui/dead-letters", "/ui/deliveries")


def failure(audit_id: str, code: str, at: datetime) -> dict[str, Any]:
    data = {"error_code": code, "error_detail": f"{code} here", "failed_by": "workflow"}
    return envelope("AuditFailed", audit_id, data, at=at)


def test_the_overview_charts_failures_per_hour_by_code_and_live_pages_are_marked(
    tmp_path: Path, simulator: SimulatorServer
) -> None:
    now = datetime.now(UTC)
    settings = server_settings(tmp_path, simulator)
    with LiveServer(API_AND_PIPELINE, **settings) as live, live.client() as client:
        live.wait_pipeline_live()
        publish(
            client,
            *(started(a, minutes_ago=6 * 24 * 60) for a in ("a-old", "a-two", "a-one", "a-now")),
            failure("a-old", "oom", now - timedelta(days=3)),  # in the 7 d chart only
            failure("a-two", "db_error", now - timedelta(hours=2)),
            failure("a-one", "oom", now - timedelta(hours=1)),
            failure("a-now", "oom", now),
        )
        for audit_id in ("a-old", "a-two", "a-one", "a-now"):
            wait_for(client, audit_id, lambda r: r["status"] == "failed")

        overview = client.get("/ui")
        assert overview.status_code == 200
        day = _figure(overview.text, "24h")
        week = _figure(overview.text, "7d")
        assert _bars(day) == {
            (hour(now - timedelta(hours=2)), "db_error"): "1",
            (hour(now - timedelta(hours=1)), "oom"): "1",
            (hour(now), "oom"): "1",
        }
        assert _bars(week) == {**_bars(day), (hour(now - timedelta(days=3)), "oom"): "1"}
        assert _legend(day) == [("oom", "2"), ("db_error", "1")]
        assert _legend(week) == [("oom", "3"), ("db_error", "1")]
        assert "Failures per hour by error code, last 24 h" in day
        assert 'href="/ui/audits?status=failed&amp;code=oom"' in day
        # the link leads to that code's failures
        listed = client.get("/ui/audits", params={"status": "failed", "code": "oom"})
        assert set(re.findall(r'<tr data-audit="([^"]+)"', listed.text)) == {
            "a-old",
            "a-one",
            "a-now",
        }

        # the overview and the lists read themselves again; the page says how without script
        for path in LIVE_PAGES:
            page = client.get(path)
            assert page.status_code == 200, path
            assert re.search(f'<main [^>]*data-refresh="{REFRESH_SECONDS}"', page.text), path
            assert '<script src="/ui/static/console.js" defer></script>' in page.text
        assert "<noscript>" in overview.text
        assert "data-refresh" not in client.get("/ui/audits/a-now").text
        script = client.get("/ui/static/console.js")
        assert script.status_code == 200 and "sessionStorage" in script.text


def hour(moment: datetime) -> str:
    return moment.replace(minute=0, second=0, microsecond=0).strftime("%Y-%m-%dT%H:%MZ")


def _figure(html: str, key: str) -> str:
    found = re.search(rf'<figure class="chart" id="chart-{key}".*?</figure>', html, re.S)
    assert found, f"no {key} chart on the overview"
    return found.group(0)


def _bars(figure: str) -> dict[tuple[str, str], str]:
    found = {}
    for code, rects in re.findall(r'data-code="([^"]+)"><g [^>]*>(.*?)</g>', figure):
        for hour, n in re.findall(r'data-hour="([^"]+)" data-count="(\d+)"', rects):
            found[(hour, code)] = n
    return found


def _legend(figure: str) -> list[tuple[str, str]]:
    return re.findall(r'<li data-code="([^"]+)">.*?<span class="n">(\d+)</span>', figure)


# --- in Chromium ---------------------------------------------------------------------------


def publish_failure(serve: Serve, audit_id: str, code: str = "oom") -> None:
    """An audit started and failed, through ``auditrec publish``; back once it is projected."""
    now = datetime.now(UTC)
    lines = [
        line("AuditStarted", audit_id, now - timedelta(minutes=5), project_id="p-live"),
        line(
            "AuditFailed",
            audit_id,
            now,
            error_code=code,
            error_detail="failed while the page was open",
            failed_by="workflow",
        ),
    ]
    done = subprocess.run(
        [AUDITREC, "publish", "-"],
        env=serve.env,
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr

    def status() -> str | None:
        answer = httpx.get(
            f"{serve.url}/audits/{audit_id}",
            params={"probe": "false"},
            headers={"Authorization": "Bearer viewer-secret-0002"},
            timeout=10,
        )
        return str(answer.json()["status"]) if answer.status_code == 200 else None

    eventually_sync(status, until=lambda s: s == "failed", timeout=60, interval=0.2)


def mark_page(driver: Any) -> None:
    """A mark only this page load carries: a reload (or any navigation) loses it."""
    driver.execute_script("window.auditrecTestMark = 'still this page';")


def same_page(driver: Any) -> bool:
    return bool(driver.execute_script("return window.auditrecTestMark === 'still this page';"))


def wait_until(driver: Any, check: Any, what: str, timeout: float = 6 * REFRESH_SECONDS) -> None:
    from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, timeout, ignored_exceptions=[StaleElementReferenceException])
    try:
        wait.until(lambda d: check(d))
    except TimeoutException:
        live = driver.find_element("id", "live-state").text
        raise AssertionError(f"no {what} within {timeout} s (the page says: {live!r})") from None


def ticks(driver: Any) -> int:
    value = driver.find_element("tag name", "main").get_attribute("data-ticks")
    return int(value or 0)


def rows(driver: Any) -> set[str]:
    found = driver.find_elements("css selector", "main tr[data-audit]")
    return {r.get_attribute("data-audit") for r in found}


def still_for_two_ticks(driver: Any) -> None:
    """Wait for two of the page's own ticks: any read it would make has had its chance."""
    start = ticks(driver)
    wait_until(driver, lambda d: ticks(d) >= start + 2, "two ticks of the live page")


def test_live_pages_show_a_new_failure_without_a_reload_and_pausing_stops_them(
    serve: Serve, browser: Any, tmp_path: Path
) -> None:
    driver = browser
    driver.implicitly_wait(0)  # absent elements are asked about here; never wait for them

    # the dead letters: a record set aside after the page loaded is listed, same page
    sign_in(driver, serve, "admin-secret-0001", then="/ui/dead-letters")
    assert not driver.find_elements("css selector", "#dead-letters tr[data-position]")
    mark_page(driver)
    asyncio.run(append_poison(serve))
    wait_until(
        driver,
        lambda d: d.find_elements("css selector", "#dead-letters tr[data-position]"),
        "the dead letter to be listed",
    )
    assert same_page(driver)

    driver.get(f"{serve.url}/ui")
    assert text_of(driver, "#live-toggle") == "Pause live updates"
    assert driver.find_element("tag name", "main").get_attribute("data-live") == "on"
    assert figures(driver)["failed"] == "0"
    assert "No failures in this window." in text_of(driver, "#chart-24h")

    # the overview: a failure after the page loaded shows in its figures and chart, same page
    mark_page(driver)
    publish_failure(serve, "a-live-1", "oom")
    wait_until(driver, lambda d: figures(d)["failed"] == "1", "the failed figure to read 1")
    wait_until(
        driver,
        lambda d: d.find_elements("css selector", '#chart-24h a[data-code="oom"] rect.bar'),
        "an oom bar in the 24 h chart",
    )
    assert same_page(driver)
    legend = driver.find_element("css selector", '#chart-7d li[data-code="oom"] a')
    assert legend.get_attribute("href").endswith("/ui/audits?status=failed&code=oom")
    screenshot(driver, tmp_path, "overview-live-chart")

    # the audit list: a newly failed audit appears as a row, same page
    driver.get(f"{serve.url}/ui/audits?status=failed")
    assert rows(driver) == {"a-live-1"}
    mark_page(driver)
    opened = "const f = document.querySelector('main details'); f.open = true; return f.id;"
    fold = driver.execute_script(opened)  # the bulk actions' fold, opened as a click would
    publish_failure(serve, "a-live-2", "db_error")
    wait_until(driver, lambda d: "a-live-2" in rows(d), "a-live-2 to be listed")
    assert same_page(driver) and rows(driver) == {"a-live-1", "a-live-2"}
    assert driver.find_element("id", fold).get_attribute("open") is not None  # still open

    # input not yet sent holds the page: the typed text stays, no new row comes
    field = driver.find_element("css selector", "main form input[type=text]")
    field.send_keys("half-typed")
    driver.execute_script("document.activeElement.blur();")
    publish_failure(serve, "a-live-3")
    still_for_two_ticks(driver)
    assert "a-live-3" not in rows(driver)
    assert field.get_attribute("value") == "half-typed"  # the same field, as typed
    assert "held: a form has input not yet sent" in text_of(driver, "#live-state")

    # paused: nothing is read again, and the choice holds on the next page of the tab
    driver.get(f"{serve.url}/ui/audits?status=failed")
    assert rows(driver) == {"a-live-1", "a-live-2", "a-live-3"}
    driver.find_element("id", "live-toggle").click()
    assert text_of(driver, "#live-toggle") == "Resume live updates"
    assert driver.find_element("tag name", "main").get_attribute("data-live") == "paused"
    mark_page(driver)
    publish_failure(serve, "a-live-4")
    still_for_two_ticks(driver)
    assert "a-live-4" not in rows(driver) and same_page(driver)
    driver.get(f"{serve.url}/ui")
    assert driver.find_element("tag name", "main").get_attribute("data-live") == "paused"
    assert text_of(driver, "#live-toggle") == "Resume live updates"
    assert figures(driver)["failed"] == "4"  # a page load reads, paused or not
    mark_page(driver)
    publish_failure(serve, "a-live-5")
    still_for_two_ticks(driver)
    assert figures(driver)["failed"] == "4"

    # resumed: read at once, and again every few seconds
    driver.find_element("id", "live-toggle").click()
    assert text_of(driver, "#live-toggle") == "Pause live updates"
    wait_until(driver, lambda d: figures(d)["failed"] == "5", "the failed figure to read 5")
    publish_failure(serve, "a-live-6")
    wait_until(driver, lambda d: figures(d)["failed"] == "6", "the failed figure to read 6")
    assert same_page(driver)
