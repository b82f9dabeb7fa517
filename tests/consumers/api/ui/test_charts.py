"""The failure charts' markup: a bar's parts for the counts, stacked by code, links into the
audit list, labelled axes and legend, every text escaped, and the empty window."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

from consumers.api.ui.charts import colour, failure_chart, failures_link

NOW = datetime(2026, 12, 6, 12, 34, 56, tzinfo=UTC)
H = timedelta(hours=1)
TEN = datetime(2026, 12, 6, 10, tzinfo=UTC)
SVG = "{http://www.w3.org/2000/svg}"


def parsed(markup: str) -> ET.Element:
    """The figure as XML (the markup is well-formed: XML parses it, or the test fails)."""
    return ET.fromstring(markup.replace("<svg ", f'<svg xmlns="{SVG[1:-1]}" ', 1))


def bars(markup: str) -> list[dict[str, str]]:
    """Each bar's part: its code's link and colour (of the group it is in), hour, count,
    place, height and tooltip, in drawing order."""
    found = []
    for group in re.finditer(
        r'<a href="(?P<href>[^"]*)" tabindex="-1" data-code="(?P<code>[^"]*)">'
        r'<g fill="(?P<fill>#[0-9a-f]{6})">(?P<rects>.*?)</g></a>',
        markup,
    ):
        for m in re.finditer(
            r'<rect class="bar" data-hour="(?P<hour>[^"]*)" data-count="(?P<n>\d+)" '
            r'x="(?P<x>[\d.]+)" y="(?P<y>[\d.]+)" width="[\d.]+" height="(?P<h>[\d.]+)">'
            r"<title>(?P<title>[^<]*)</title></rect>",
            group["rects"],
        ):
            found.append({**m.groupdict(), **group.groupdict()})
            del found[-1]["rects"]
    return found


def test_a_bar_an_hour_stacked_by_code_with_heights_in_proportion_and_links() -> None:
    counts = {
        (TEN, "oom"): 3,
        (TEN, "db_error"): 1,
        (TEN + H, "oom"): 2,
        (NOW - timedelta(hours=30), "oom"): 9,  # before the window: not drawn, not counted
    }
    chart = failure_chart(counts, NOW - timedelta(hours=24), NOW, "Failures, last 24 h", "24h")
    parsed(chart)
    drawn = bars(chart)
    assert [(b["hour"], b["code"], b["n"]) for b in drawn] == [
        ("2026-12-06T10:00Z", "oom", "3"),  # the code with most failures at the bottom
        ("2026-12-06T11:00Z", "oom", "2"),
        ("2026-12-06T10:00Z", "db_error", "1"),
    ]
    heights = [float(b["h"]) for b in drawn]
    assert heights[0] == 3 * heights[2] and heights[1] == 2 * heights[2]
    assert float(drawn[2]["y"]) + heights[2] == float(drawn[0]["y"])  # stacked on oom's
    assert drawn[2]["x"] == drawn[0]["x"] < drawn[1]["x"]  # one bar an hour, left to right
    assert drawn[0]["fill"] == drawn[1]["fill"] == colour("oom") != drawn[2]["fill"]
    assert drawn[0]["title"] == "oom: 3 failures, 2026-12-06 10:00–11:00 UTC"
    assert drawn[2]["title"] == "db_error: 1 failure, 2026-12-06 10:00–11:00 UTC"
    assert drawn[0]["href"] == "/ui/audits?status=failed&amp;code=oom"
    assert drawn[2]["href"] == "/ui/audits?status=failed&amp;code=db_error"
    # the legend: each code's total in the window, most first, linking to its failures
    legend = re.findall(
        r'<li data-code="([^"]+)"><a href="([^"]+)">.*?</svg> \1 <span class="n">(\d+)</span>',
        chart,
    )
    assert legend == [
        ("oom", "/ui/audits?status=failed&amp;code=oom", "5"),
        ("db_error", "/ui/audits?status=failed&amp;code=db_error", "1"),
    ]


def test_axes_are_labelled_and_the_chart_is_named_for_assistive_technology() -> None:
    chart = failure_chart({(TEN, "oom"): 7}, NOW - timedelta(hours=24), NOW, "Last 24 h", "24h")
    figure = parsed(chart)
    svg = figure.find(f"{SVG}svg")
    assert svg is not None
    assert svg.get("aria-labelledby") == "chart-24h-title chart-24h-desc"
    assert svg.findtext(f"{SVG}title") == "Last 24 h"
    desc = svg.findtext(f"{SVG}desc")
    assert desc == ("Failures per hour, 2026-12-05 12:34 – 2026-12-06 12:34 UTC: 7 in all (oom 7).")
    texts = [t.text for t in svg.iter(f"{SVG}text")]
    assert "failures" in texts and "hour (UTC)" in texts
    assert [t for t in texts if t and t.isdigit()] == ["0", "2", "4", "6", "8"]  # 7 → top 8
    hours = [t for t in texts if t and ":" in t]
    assert hours == ["12:00", "18:00", "00:00", "06:00", "12:00"]  # 25 hours: every 6
    week = failure_chart({(TEN, "oom"): 1}, NOW - timedelta(days=7), NOW, "Last 7 d", "7d")
    days = re.findall(r'text-anchor="middle">(\d\d-\d\d)</text>', week)
    assert days == ["11-30", "12-01", "12-02", "12-03", "12-04", "12-05", "12-06"]  # midnights
    assert len(bars(week)) == 1


def test_every_text_is_escaped_and_the_link_is_the_callers() -> None:
    odd = '<script>alert("x")</script>&'
    seen: list[tuple[str, datetime, datetime]] = []

    def link(code: str, since: datetime, until: datetime) -> str:
        seen.append((code, since, until))
        return f"/ui/audits?code={code}&x=1"

    chart = failure_chart({(TEN, odd): 2}, NOW - timedelta(hours=24), NOW, f"T {odd}", odd, link)
    parsed(chart)  # well-formed: nothing broke out of an attribute or element
    assert "<script>" not in chart and 'alert("x")' not in chart
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;" in chart
    assert 'id="chart--script-alert--x----script--"' in chart  # ids from the key: a slug
    assert set(seen) == {(odd, NOW - timedelta(hours=24), NOW)}  # bars and legend: the window
    assert "/ui/audits?code=&lt;script&gt;" in chart


def test_an_empty_window_says_so_and_draws_no_bar() -> None:
    for counts in ({}, {(NOW - timedelta(days=2), "oom"): 4}, {(TEN, "oom"): 0}):
        chart = failure_chart(counts, NOW - timedelta(hours=24), NOW, "Last 24 h", "24h")
        parsed(chart)
        assert "No failures in this window." in chart
        assert "<rect" not in chart and "<svg" not in chart


def test_the_list_link_filters_failed_audits_by_code() -> None:
    assert failures_link("oom", TEN, TEN + H) == "/ui/audits?status=failed&code=oom"
    assert failures_link("a&b", TEN, NOW) == "/ui/audits?status=failed&code=a%26b"
