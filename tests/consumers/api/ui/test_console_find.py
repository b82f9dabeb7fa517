"""Finding an audit in the console, in a real Chromium against a real ``auditrec serve``, on
both backend pairs: the search by audit id and by instance id (and the link that shares it),
the held filter and marker (in the console, the API and the CLI), and the sorts by end and by
age (a finished audit's age is its run, not the time since its start)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
from selenium.webdriver.support.select import Select

from consumers.workflows.simulator.server import SimulatorServer
from tests import cli
from tests.consumers.api.ui.conftest import Serve, screenshot
from tests.consumers.api.ui.dataset import LOST, publish_known_data_set
from tests.consumers.api.ui.driving import sign_in, submit, text_of
from tests.eventually import eventually_sync


def listed(driver: Any) -> list[str]:
    return [
        str(r.get_attribute("data-audit"))
        for r in driver.find_elements("css selector", "#audits tbody tr[data-audit]")
    ]


def follow(driver: Any, link_id: str) -> dict[str, list[str]]:
    """Click a link of the list and wait for the page it names; its query."""
    href = driver.find_element("id", link_id).get_attribute("href")
    driver.find_element("id", link_id).click()
    eventually_sync(lambda: driver.current_url, until=lambda u: u == href, timeout=15)
    return parse_qs(urlsplit(driver.current_url).query)


def search(driver: Any, text: str) -> None:
    box = driver.find_element("id", "search")
    box.clear()
    box.send_keys(text)
    submit(driver, "apply-filters")


def test_finding_audits_by_search_held_and_sorts_in_chromium(
    serve: Serve, simulator: SimulatorServer, browser: Any, tmp_path: Path
) -> None:
    driver = browser
    publish_known_data_set(serve, simulator)
    sign_in(driver, serve, "viewer-secret-0002", then="/ui/audits")
    assert text_of(driver, "#total") == "10 audits"

    # the search box: an audit id, then a workflow instance id; the filters are in the URL
    search(driver, "a-stuck")
    assert listed(driver) == ["a-stuck"] and text_of(driver, "#total") == "1 audit"
    search(driver, "wf-oom")
    assert listed(driver) == ["a-oom"]
    shared = driver.current_url
    assert parse_qs(urlsplit(shared).query)["q"] == ["wf-oom"]
    driver.get(f"{serve.url}/ui")
    driver.get(shared)  # a link to the search finds it again
    assert listed(driver) == ["a-oom"]
    search(driver, "a-nobody")
    assert listed(driver) == [] and text_of(driver, "#total") == "0 audits"
    search(driver, "")

    # held by the brake: marked in the list, and a filter
    Select(driver.find_element("name", "held")).select_by_value("true")
    submit(driver, "apply-filters")
    assert sorted(listed(driver)) == sorted(LOST)
    marks = driver.find_elements("css selector", "#audits tbody tr[data-held] .held")
    assert [m.text for m in marks] == ["held"] * len(LOST)
    Select(driver.find_element("name", "held")).select_by_value("false")
    submit(driver, "apply-filters")
    assert not set(listed(driver)) & set(LOST) and len(listed(driver)) == 6
    Select(driver.find_element("name", "held")).select_by_value("")
    submit(driver, "apply-filters")

    # sorted by the end: the latest first (the two the sweep failed, then the completed one,
    # then the one that failed 5 minutes after its start), the unfinished last
    assert follow(driver, "sort-ended") == {"sort": ["ended"], "order": ["desc"]}
    rows = listed(driver)
    assert set(rows[:2]) == {"a-oom", "a-term"} and rows[2:4] == ["a-done", "a-d1"]
    header = driver.find_element("css selector", "th[aria-sort]")
    assert header.get_attribute("aria-sort") == "descending"
    assert follow(driver, "sort-ended") == {"sort": ["ended"], "order": ["asc"]}
    assert listed(driver)[:2] == ["a-d1", "a-done"]

    # sorted by age: a finished audit's age is its run (5 and 30 minutes for audits started
    # two hours ago), so they come right after the one started 2 minutes ago
    follow(driver, "sort-age")
    assert listed(driver)[0] == "a-stuck"  # running for 3 h
    assert follow(driver, "sort-age") == {"sort": ["age"], "order": ["asc"]}
    assert listed(driver)[:3] == ["a-young", "a-d1", "a-done"]
    # a filter keeps the sort
    driver.find_element("name", "project").send_keys("p1")
    submit(driver, "apply-filters")
    assert parse_qs(urlsplit(driver.current_url).query)["sort"] == ["age"]
    assert listed(driver)[:3] == ["a-young", "a-d1", "a-done"]
    assert text_of(driver, "#total") == "5 audits"
    screenshot(driver, tmp_path, "audits-sorted-by-age")

    # the held filter by the same name over the API and on the command line
    api = httpx.get(
        f"{serve.url}/audits",
        params={"held": "true"},
        headers={"Authorization": "Bearer viewer-secret-0002"},
        timeout=30,
    )
    assert api.status_code == 200, api.text
    assert api.json()["total"] == len(LOST)
    assert sorted(a["audit_id"] for a in api.json()["audits"]) == sorted(LOST)
    held = cli.run("audits", "--held", env=serve.env)
    assert held.returncode == 0, held.stderr
    assert held.stdout.count("(held)") == len(LOST) and held.stderr == f"{len(LOST)} audits\n"
    found = cli.run("audits", "--q", "wf-stuck", "--json", env=serve.env)
    assert found.returncode == 0 and '"a-stuck"' in found.stdout
