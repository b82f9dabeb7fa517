"""One audit's console page over plain HTTP against a live API: the failure summed up at the top,
the row as labelled fields with readable values, the timeline's repeated observations collapsed
(with their count and time span), holds shown as holds, the transition table folded away."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from consumers.eventlog.codec import encode
from consumers.workflows.simulator.server import SimulatorServer
from tests.consumers.api.conftest import LiveServer, server_settings
from tests.consumers.api.ui.audit_histories import (
    AGAIN,
    HEALTHY,
    STEP,
    failed_by_the_watchdog,
    healthy_then_held,
)
from tests.eventually import eventually_sync

WHEN = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ"  # the console's one timestamp format


def _pages(tmp_path: Path, simulator: SimulatorServer, start: datetime) -> dict[str, str]:
    events = [
        *healthy_then_held("a-held", start, "wf-held"),
        *failed_by_the_watchdog("a-dead", start, "wf-dead"),
    ]
    with (
        LiveServer(["api", "projector"], **server_settings(tmp_path, simulator)) as live,
        live.client() as client,
    ):
        log = live.backends.log if live.backends is not None else None
        assert log is not None
        live.call(lambda: log.append([encode(log.topics.lifecycle, e) for e in events]))
        for audit_id, status in (("a-held", "running"), ("a-dead", "failed")):
            eventually_sync(
                lambda a=audit_id: client.get(f"/audits/{a}", params={"probe": "false"}).json(),
                until=lambda body, s=status: (
                    body.get("status") == s
                    and (s != "running" or body.get("held_decision_id") is not None)
                ),
                timeout=30,
                message=f"{audit_id} projected",
            )
        pages = {}
        for audit_id in ("a-held", "a-dead"):
            response = client.get(f"/ui/audits/{audit_id}")
            assert response.status_code == 200, response.text
            pages[audit_id] = response.text
        return pages


def _field(html: str, column: str) -> str:
    found = re.search(rf'<tr data-column="{column}"><th>([^<]*)</th><td>(.*?)</td></tr>', html)
    assert found, f"no field {column}"
    return f"{found.group(1)}: {re.sub(r'<[^>]+>', '', found.group(2))}"


def test_the_audit_page_sums_up_labels_collapses_and_tells_holds(
    tmp_path: Path, simulator: SimulatorServer
) -> None:
    # given an audit healthy for a while then held by the brake, and one failed by the watchdog
    start = (datetime.now(UTC) - timedelta(hours=3)).replace(microsecond=0)
    pages = _pages(tmp_path, simulator, start)
    dead, held = pages["a-dead"], pages["a-held"]

    # then the failure is summed up at the top: code, reason, rule, who, when (and how long ago)
    summary = re.search(r'<section id="summary" class="summary failed">(.*?)</section>', dead, re.S)
    assert summary, "no failure summary"
    assert dead.index('id="summary"') < dead.index('id="row"') < dead.index('id="timeline"')
    text = summary.group(1)
    assert '<code id="summary-code">instance_lost</code>' in text
    assert '<p id="summary-detail">instance_lost detail</p>' in text
    assert '<dd id="summary-rule">instance_lost</dd>' in text
    assert '<dd id="summary-who">reconciler (found by the watchdog)</dd>' in text
    failed_at = (start + timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%SZ")
    assert re.search(
        rf'<dd id="summary-when"><time datetime="{failed_at.replace(" ", "T")}" '
        rf'title="(1 h 59 min|2 h) ago">{failed_at}</time> <span class="ago">(1 h 59 min|2 h) ago',
        text,
    ), text

    # and the row is labelled fields with readable values, timestamps in the one format
    assert _field(dead, "overturned") == "Overturned: no"
    assert _field(dead, "completed_at") == "Completed at: —"  # a failure completes nothing
    assert re.fullmatch(rf"Failed at: {failed_at} (1 h 59 min|2 h) ago", _field(dead, "failed_at"))
    assert _field(dead, "failed_by") == "Failed by: reconciler"
    assert _field(dead, "reconciled_by") == "Found by: watchdog"
    assert _field(dead, "error_code") == "Error code: instance_lost"  # codes stay exact
    assert _field(held, "last_observed_status") == "Last observed status: not found"
    assert "overturned False" not in dead and ">False<" not in dead and ">None<" not in dead
    for page in (dead, held):
        raw = re.search(r"\d\d:\d\d:\d\d(\.\d+)?\+00:00", page)  # no raw isoformat
        assert raw is None, page[raw.start() - 200 : raw.end()]

    # and the healthy stretch is one line: count and time span
    rows = re.findall(
        r'<tr class="step collapsed (\w+)" data-type="(\w+)" data-rule="(\w+)" '
        r'data-kind="\w+" data-count="(\d+)">\s*<td>(\d+)–(\d+)</td>\s*<td colspan="6">(.*?)</td>',
        held,
        re.S,
    )
    assert [r[:4] for r in rows] == [
        ("quiet", "WorkflowStatusObserved", "healthy", str(HEALTHY)),
        ("held", "WorkflowStatusObserved", "instance_lost", str(AGAIN)),
    ]
    first, last = start + STEP, start + HEALTHY * STEP
    quiet = re.sub(r"<details>.*", "", rows[0][6], flags=re.S)
    assert re.sub(r"<[^>]+>", "", quiet).strip() == (
        f"healthy, {HEALTHY} observations {first:%H:%M}–{last:%H:%M}"
    )
    assert (rows[0][4], rows[0][5]) == ("2", str(HEALTHY + 1))  # the steps' numbers
    assert rows[0][6].count("<li ") == HEALTHY  # each one still there, folded

    # and the hold is a hold: its summary, the hold's step and the later sweeps marked held,
    # never "no decision was recorded"
    assert '<section id="summary" class="summary held">' in held
    assert "Held by the mass-failure brake" in held
    assert "no decision was recorded" not in held
    assert 'class="badge held">held</span> instance lost while held, no second decision' in held
    assert f'<b class="count">{AGAIN}</b> observations' in held
    hold_row = re.search(
        r'<tr class="step held" data-type="AuditFailureHeld"[^>]*>(.*?)</tr>', held, re.S
    )
    assert hold_row, "the hold's step is not marked held"
    assert 'running <span class="badge held">held</span>' in hold_row.group(1)
    steps = re.findall(r'<tr class="step[^"]*" data-type="(\w+)"', held)
    assert steps == [
        "AuditStarted",
        "WorkflowStatusObserved",  # the healthy stretch, collapsed
        "WorkflowStatusObserved",  # the observation that made the hold
        "AuditFailureHeld",
        "WorkflowStatusObserved",  # the sweeps since, collapsed
    ]

    # and the transition table is folded away behind the diagram
    for page in (dead, held):
        folded = re.search(r'<details id="transitions">\s*<summary>Transition table', page)
        assert folded and page.index("<svg") < folded.start()
        assert page.index('<table class="transitions">') > folded.start()
