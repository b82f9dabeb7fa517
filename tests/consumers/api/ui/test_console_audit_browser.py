"""One audit's page in a real Chromium against a real ``auditrec serve``, on both backend pairs:
the failure summed up at the top, the timeline's healthy stretch and held sweeps each collapsed
into one line that unfolds to every observation, and the transition table folded away until
asked for."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from consumers.eventlog.codec import encode
from consumers.eventlog.factory import open_event_log
from consumers.eventlog.port import Topics
from statemachine.events import AuditEvent
from tests.consumers.api.ui.audit_histories import (
    AGAIN,
    HEALTHY,
    STEP,
    failed_by_the_watchdog,
    healthy_then_held,
)
from tests.consumers.api.ui.conftest import Serve, screenshot
from tests.consumers.api.ui.driving import sign_in, text_of
from tests.eventually import eventually_sync


async def _append(serve: Serve, events: list[AuditEvent]) -> None:
    topics = Topics(serve.env["AUDITREC_TOPIC_PREFIX"])
    log = open_event_log(serve.env["AUDITREC_EVENT_LOG_URL"], topics)
    await log.start()
    try:
        await log.append([encode(topics.lifecycle, e) for e in events])
    finally:
        await log.stop()


def test_the_collapsed_timeline_in_chromium(serve: Serve, browser: Any, tmp_path: Path) -> None:
    driver = browser
    start = (datetime.now(UTC) - timedelta(hours=3)).replace(microsecond=0)
    asyncio.run(
        _append(
            serve,
            [
                *healthy_then_held("a-held", start, "wf-held"),
                *failed_by_the_watchdog("a-dead", start, "wf-dead"),
            ],
        )
    )
    sign_in(driver, serve, "viewer-secret-0002")

    # the failed audit: its failure summed up above everything else
    def summary_of(audit_id: str) -> str:
        driver.get(f"{serve.url}/ui/audits/{audit_id}")
        found = driver.find_elements("css selector", "#summary")
        return str(found[0].text) if found else ""

    summary = eventually_sync(
        lambda: summary_of("a-dead"),
        until=lambda text: "instance_lost" in text,
        timeout=60,
        interval=0.5,
        message="a-dead's failure on its page",
    )
    assert "Failed: instance_lost" in summary and "reconciler (found by the watchdog)" in summary
    assert text_of(driver, "#summary-rule") == "instance_lost"
    assert text_of(driver, '#row tr[data-column="overturned"] td') == "no"

    # the held audit: its timeline's two runs each one line, with count and span
    eventually_sync(
        lambda: summary_of("a-held"),
        until=lambda text: "Held by the mass-failure brake" in text,
        timeout=60,
        interval=0.5,
        message="a-held's hold on its page",
    )
    steps = driver.find_elements("css selector", "#timeline tbody > tr.step")
    kinds = [(r.get_attribute("data-type"), r.get_attribute("data-kind")) for r in steps]
    assert kinds == [
        ("AuditStarted", None),
        ("WorkflowStatusObserved", "quiet"),
        ("WorkflowStatusObserved", None),
        ("AuditFailureHeld", None),
        ("WorkflowStatusObserved", "held"),
    ]
    quiet, held = steps[1], steps[4]
    first, last = start + STEP, start + HEALTHY * STEP
    assert quiet.text.startswith(f"2–{HEALTHY + 1} healthy, {HEALTHY} observations")
    assert f"{first:%H:%M}–{last:%H:%M}" in quiet.text
    assert held.text.split("\n")[0].endswith(
        f"held instance lost while held, no second decision, {AGAIN} observations "
        f"{held.find_element('css selector', '.span').text}"
    )
    assert "no decision was recorded" not in driver.find_element("id", "timeline").text

    # folded: each observation is there but hidden until the line is opened
    members = quiet.find_elements("css selector", "ol.members li")
    assert len(members) == HEALTHY and not members[0].is_displayed()
    quiet.find_element("css selector", "details > summary").click()
    eventually_sync(
        lambda: members[0].is_displayed(), until=bool, timeout=5, message="the run unfolded"
    )
    assert "healthy, no change" in members[0].text

    # the transition table is behind the diagram, folded until asked for
    table = driver.find_element("css selector", "#transitions table.transitions")
    assert not table.is_displayed()
    driver.find_element("css selector", "#transitions > summary").click()
    eventually_sync(table.is_displayed, until=bool, timeout=5, message="the table unfolded")
    screenshot(driver, tmp_path, "audit-collapsed")
