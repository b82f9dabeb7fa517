"""The console's actions in a real Chromium against a real ``auditrec serve``, on both backend
pairs: a read-only token is offered no form that changes anything on any page, and an operator
corrects a dead letter's body in the console and replays it (a dry run first)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from consumers.workflows.simulator.server import SimulatorServer
from tests.consumers.api.ui.conftest import Serve, screenshot
from tests.consumers.api.ui.dataset import append_poison, publish_known_data_set
from tests.consumers.api.ui.driving import sign_in, sign_out, submit, text_of
from tests.eventually import eventually_sync

PAGES = ["/ui", "/ui/audits", "/ui/audits/a-stuck", "/ui/audits/a-oom", "/ui/dead-letters"]


def action_forms(driver: Any) -> list[str]:
    """Where the page's forms that change something post to (signing out and the incident
    banner's aside)."""
    driver.implicitly_wait(0)
    try:
        forms = driver.find_elements(
            "css selector", 'form[method="post"]:not(.logout):not(.incident-form)'
        )
        return [str(f.get_attribute("action")) for f in forms]
    finally:
        driver.implicitly_wait(10)


def test_read_only_sees_no_action_form_and_an_operator_replays_a_corrected_dead_letter(
    serve: Serve, simulator: SimulatorServer, browser: Any, tmp_path: Path
) -> None:
    driver = browser
    asyncio.run(append_poison(serve))
    publish_known_data_set(serve, simulator)  # the brake engaged, audits failed and running

    # a read-only token: every page without a form that changes something
    sign_in(driver, serve, "viewer-secret-0002")
    driver.get(f"{serve.url}/ui/dead-letters")
    poison = driver.find_element("css selector", "#dead-letters tbody tr[data-position] a")
    letter = f"/ui/dead-letters/{poison.text}"
    seen: dict[str, list[str]] = {}
    for path in [*PAGES, letter, "/ui/deliveries"]:
        driver.get(f"{serve.url}{path}")
        seen[path] = action_forms(driver)
    assert {path: forms for path, forms in seen.items() if forms} == {}
    assert len(seen) == len(PAGES) + 2
    sign_out(driver)

    # an operator is offered them (the brake's, the audit's, the dead letter's)
    sign_in(driver, serve, "admin-secret-0001")
    offered = {}
    for path in ["/ui", "/ui/audits/a-stuck", letter]:
        driver.get(f"{serve.url}{path}")
        offered[path] = len(action_forms(driver))
    assert offered == {"/ui": 2, "/ui/audits/a-stuck": 2, letter: 1}

    # the poison record does not decode: no replay of it as it is, but its text to correct
    driver.get(f"{serve.url}{letter}")
    assert text_of(driver, "#decodes").startswith("no: ")
    body = driver.find_element("id", "body")
    original = json.loads(str(body.get_attribute("value")))
    assert original["audit_id"] == "a-poison" and original["data"]["colour"] == "blue"
    corrected = {**original, "data": {"project_id": "p1"}}
    body.clear()
    body.send_keys(json.dumps(corrected, indent=2))
    submit(driver, "replay-corrected")
    assert "the corrected body decodes (AuditStarted" in text_of(driver, "#replay-preview")
    assert json.loads(str(driver.find_element("id", "confirm-body").get_attribute("value"))) == (
        corrected
    )
    submit(driver, "confirm-replay")
    assert text_of(driver, "#replayed").startswith("Replayed with a corrected body")
    assert "by token:admin" in text_of(driver, "#replayed-by")
    assert not action_forms(driver)  # once only
    screenshot(driver, tmp_path, "dead-letter-replayed")

    # the corrected start reaches the projection: the audit's page shows it running
    def status() -> str:
        driver.get(f"{serve.url}/ui/audits/a-poison")
        found = driver.find_elements("id", "current-status")
        return str(found[0].text) if found else ""

    eventually_sync(status, until=lambda s: s == "running", timeout=60, interval=0.5)
