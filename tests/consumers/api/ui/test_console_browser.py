"""The console in a real browser against a real ``auditrec serve``, on both backend pairs:
sign-in, the overview's figures for a known data set, finding a stuck audit, failing, probing
and restoring it, the brake's release and a bulk restore with their previews, the timelines
that follow, dead letters, the backtest, and what is refused (a read-only token, a form without
the session or with another CSRF token, no token at all)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
from selenium.webdriver.support.select import Select

from consumers.workflows.simulator.server import SimulatorServer
from tests.consumers.api.ui.conftest import Serve, screenshot
from tests.consumers.api.ui.dataset import LOST, append_poison, publish_known_data_set
from tests.consumers.api.ui.driving import figures, sign_in, sign_out, submit, table, text_of
from tests.eventually import eventually_sync


def test_the_console_end_to_end_in_chromium(
    serve: Serve, simulator: SimulatorServer, browser: Any, tmp_path: Path
) -> None:
    driver = browser
    asyncio.run(append_poison(serve))
    publish_known_data_set(serve, simulator)

    # no session: the login form; a wrong token is refused on it
    driver.get(f"{serve.url}/ui/audits")
    assert "/ui/login" in driver.current_url
    driver.find_element("id", "token").send_keys("not-a-token")
    driver.find_element("css selector", "#login button").click()
    assert text_of(driver, "#login-error") == "unknown token"

    # a read-only token reads the overview but is offered no form to release the brake, nor
    # to fail an audit
    sign_in(driver, serve, "viewer-secret-0002")
    assert text_of(driver, "#who") == "signed in as viewer"
    assert figures(driver)["running"] == "6"
    assert not driver.find_elements("css selector", 'form[action^="/ui/brake/"]')
    driver.get(f"{serve.url}/ui/audits/a-stuck")
    driver.implicitly_wait(0)
    assert not driver.find_elements("css selector", "#fail-form")
    driver.implicitly_wait(10)
    driver.get(f"{serve.url}/ui")
    assert text_of(driver, "#brake-state") == "engaged"  # nothing happened
    assert figures(driver)["failed"] == "3"
    sign_out(driver)
    driver.get(f"{serve.url}/ui")
    assert "/ui/login" in driver.current_url  # the session is gone with the cookie

    # an operator signs in: the cookie is HTTP-only, SameSite=Strict, and holds no token
    sign_in(driver, serve, "admin-secret-0001")
    [cookie] = driver.get_cookies()
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert "admin-secret-0001" not in cookie["value"]

    # the overview's figures of the known data set
    assert figures(driver) == {
        "running": "6",
        "completed": "1",
        "failed": "3",
        "stale": "5",
        "stalled": "0",
    }
    for window in ("24 h", "7 d"):
        scope = f'.window[data-window="{window}"]'
        assert table(driver, f"{scope} table.by-code", "data-code") == {
            "oom": "1",
            "workflow_terminated": "1",
            "db_error": "1",
        }
        assert table(driver, f"{scope} table.by-finder", "data-by") == {"watchdog": "2", "-": "1"}
    stale = [
        r.get_attribute("data-audit")
        for r in driver.find_elements("css selector", "#stale tbody tr[data-audit]")
    ]
    assert stale == ["a-stuck", *sorted(LOST)]  # oldest first
    assert text_of(driver, "#brake-state") == "engaged"
    assert text_of(driver, "#held-count") == "4"
    held = {
        r.get_attribute("data-held") for r in driver.find_elements("css selector", "tr[data-held]")
    }
    assert held == set(LOST)
    components = {
        r.get_attribute("data-component"): r.find_elements("css selector", "td")[1].text
        for r in driver.find_elements("css selector", "tr[data-component]")
    }
    assert components.keys() >= {"api", "projector", "reconciler", "probe", "watchdog"}
    assert components["reconciler"] == "ok"
    screenshot(driver, tmp_path, "overview")

    # find the stuck audit: running longer than 2h30m, in project p2
    driver.get(f"{serve.url}/ui/audits")
    driver.find_element("name", "project").send_keys("p2")
    driver.find_element("name", "running_longer_than").send_keys("150m")
    submit(driver, "apply-filters")
    found = [
        r.get_attribute("data-audit")
        for r in driver.find_elements("css selector", "#audits tbody tr[data-audit]")
    ]
    assert found == ["a-stuck"]
    driver.find_element("link text", "a-stuck").click()
    assert text_of(driver, "#current-status") == "running"
    rules = [
        r.get_attribute("data-rule")
        for r in driver.find_elements("css selector", "#timeline tr.step")
    ]
    assert rules[0] == "transition" and set(rules[1:]) == {"healthy"}  # observed running
    assert (
        driver.find_element("css selector", "svg .state.current").get_attribute("data-state")
        == "running"
    )

    # fail the stuck audit, then restore it: the timeline shows both, naming the operator
    Select(driver.find_element("css selector", '#fail-form select[name="code"]')).select_by_value(
        "workflow_internal"
    )
    driver.find_element("css selector", '#fail-form input[name="reason"]').send_keys(
        "stuck for 3 h"
    )
    submit(driver, "fail")
    assert text_of(driver, "#record-code") == "workflow_internal"  # confirmed before recorded
    submit(driver, "confirm")
    assert text_of(driver, "#current-status") == "failed"
    assert text_of(driver, "#done").startswith("fail")
    assert text_of(driver, '#row tr[data-column="error_code"] td') == "workflow_internal"
    last = driver.find_elements("css selector", "#timeline tr.step")[-1]
    assert last.get_attribute("data-type") == "AuditFailed"
    assert "running → failed" in last.text and "actor=token:admin" in last.text
    driver.find_element("css selector", '#restore-form input[name="reason"]').send_keys(
        "it was alive"
    )
    submit(driver, "restore")
    submit(driver, "confirm")
    assert text_of(driver, "#current-status") == "running"
    types = [
        r.get_attribute("data-type")
        for r in driver.find_elements("css selector", "#timeline tr.step")
    ]
    assert types[-2:] == ["AuditFailed", "AuditRestored"]
    assert set(types[:-2]) == {"AuditStarted", "WorkflowStatusObserved"}
    last = driver.find_elements("css selector", "#timeline tr.step")[-1]
    assert "failed → running" in last.text and "actor=token:admin" in last.text
    assert (
        driver.find_element("css selector", "svg .state.current").get_attribute("data-state")
        == "running"
    )

    # probe it now: the manual observation lands in the timeline, naming who asked
    submit(driver, "probe")
    assert text_of(driver, "#done").startswith("probe")
    last = driver.find_elements("css selector", "#timeline tr.step")[-1]
    assert last.get_attribute("data-type") == "WorkflowStatusObserved"
    assert last.get_attribute("data-rule") == "healthy" and "trigger=manual" in last.text

    # release the brake: a preview first (nothing changes), then the confirmation
    driver.get(f"{serve.url}/ui")
    driver.find_element(
        "css selector", 'form[action="/ui/brake/release"] input[name="reason"]'
    ).send_keys("provider blip over")
    submit(driver, "brake-release")
    assert text_of(driver, "#preview-count") == "4"
    assert set(LOST) <= {a.text for a in driver.find_elements("css selector", "table a")}
    submit(driver, "confirm")
    assert text_of(driver, "#done") == "Brake released"

    # the timeline of a released audit shows the hold, its release, and the failure
    def released_timeline() -> list[str]:
        driver.get(f"{serve.url}/ui/audits/{LOST[0]}")
        return [
            r.get_attribute("data-type")
            for r in driver.find_elements("css selector", "#timeline tr.step")
        ]

    types = eventually_sync(
        released_timeline,
        until=lambda t: "AuditFailed" in t,
        timeout=60,
        interval=0.5,
        message="the released failure to reach the timeline",
    )
    assert types[0] == "AuditStarted" and types[-1] == "AuditFailed"
    order = [types.index(t) for t in ("AuditFailureHeld", "AuditFailureReleased", "AuditFailed")]
    assert order == sorted(order)
    assert text_of(driver, "#current-status") == "failed"
    last = driver.find_elements("css selector", "#timeline tr.step")[-1]
    assert "running → failed" in last.text and "reconciled_by=watchdog" in last.text
    assert (
        driver.find_element("css selector", "svg .state.current").get_attribute("data-state")
        == "failed"
    )
    screenshot(driver, tmp_path, "audit")
    driver.get(f"{serve.url}/ui")
    assert text_of(driver, "#brake-state") == "not engaged"
    assert figures(driver)["failed"] == "7"

    # the dead letters: the poison record, its reason and original bytes; no replay of it is
    # offered as it is, since it still does not decode
    driver.get(f"{serve.url}/ui/dead-letters")
    rows = driver.find_elements("css selector", "#dead-letters tbody tr[data-position]")
    assert rows, "no dead letter listed"
    assert all("colour" in r.find_element("css selector", "td.reason").text for r in rows)
    screenshot(driver, tmp_path, "dead-letters")
    rows[0].find_element("css selector", "a").click()
    assert '"audit_id": "a-poison"' in text_of(driver, "#original")
    assert "colour" in text_of(driver, "#reason")
    assert text_of(driver, "#decodes").startswith("no: ")
    driver.implicitly_wait(0)
    assert not driver.find_elements("id", "replay")
    driver.implicitly_wait(10)

    # the backtest: with a 5 h grace the four lost audits (2 h old) would not have failed
    driver.get(f"{serve.url}/ui/backtest")
    driver.find_element("name", "set").send_keys("INSTANCE_LOST_GRACE=5h")
    submit(driver, "run-backtest")
    kinds = {
        r.get_attribute("data-audit"): r.get_attribute("data-kind")
        for r in driver.find_elements("css selector", "#differences tr[data-audit]")
    }
    assert kinds == dict.fromkeys(LOST, "not_failed")

    # bulk restore over a filter: the four instance_lost failures, previewed, then confirmed
    driver.get(f"{serve.url}/ui/audits?status=failed&code=instance_lost")
    driver.find_element("css selector", "#bulk summary").click()
    driver.find_element(
        "css selector", 'form[action="/ui/bulk/restore"] input[name="reason"]'
    ).send_keys("provider outage, not lost")
    submit(driver, "bulk-restore")
    assert text_of(driver, "#preview-count") == "4"
    driver.get(f"{serve.url}/ui")
    assert figures(driver)["failed"] == "7"  # a preview changes nothing
    driver.back()
    submit(driver, "confirm")
    assert text_of(driver, "#done") == "Bulk restore: 4 audit(s)"

    def failed_now() -> str:
        driver.get(f"{serve.url}/ui")
        return figures(driver)["failed"]

    eventually_sync(failed_now, until=lambda n: n == "3", timeout=30, interval=0.3)

    # a form without the session cookie, or with another session's CSRF token, is refused
    csrf_of_admin = driver.find_element(
        "css selector", 'form.logout input[name="csrf"]'
    ).get_attribute("value")
    cookie_of_admin = driver.get_cookies()[0]["value"]
    with httpx.Client(base_url=serve.url) as client:
        bare = client.post("/ui/brake/discard", data={"csrf": csrf_of_admin, "confirm": "yes"})
        assert bare.status_code == 403 and "no valid session" in bare.text
        login = client.get("/ui/login").text
        csrf = login.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        viewer = client.post("/ui/login", data={"token": "viewer-secret-0002", "csrf": csrf})
        assert viewer.status_code == 303
        assert "viewer-secret-0002" not in viewer.headers["set-cookie"]
        crossed = client.post("/ui/brake/discard", data={"csrf": csrf_of_admin, "confirm": "yes"})
        assert crossed.status_code == 403 and "CSRF" in crossed.text
        client.cookies.clear()
        client.cookies.set("auditrec_console", cookie_of_admin, path="/ui")
        no_csrf = client.post("/ui/brake/discard", data={"confirm": "yes"})
        assert no_csrf.status_code == 403 and "CSRF" in no_csrf.text
        forged = client.post(
            "/ui/brake/discard", data={"csrf": csrf_of_admin + "x", "confirm": "yes"}
        )
        assert forged.status_code == 403
