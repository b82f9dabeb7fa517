"""Failures per hour by error code as a server-rendered chart: stacked bars in inline SVG (one
bar an hour, one colour a code), labelled axes and an HTML legend with each code's total.

Pure and self-contained: data in, markup out (every text escaped), no script, no CDN, readable
without JavaScript. A bar's part and a legend entry link into the audit list of that code's
failures in the window (:func:`failures_link`, the one place that knows the list's filter
names). Colours follow the code's place in the vocabulary, so a code has the same colour in
every chart.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from html import escape
from urllib.parse import quote

from statemachine.vocabulary import ERROR_CODES

__all__ = ["colour", "failure_chart", "failures_link", "hour_of"]

WIDTH, HEIGHT = 720, 220
LEFT, RIGHT, TOP, BOTTOM = 48, 8, 10, 40  # the plot's margins: axis labels go there
HOUR = timedelta(hours=1)
# Okabe-Ito's colour-blind-safe eight, then three more apart from them.
PALETTE = (
    "#0072b2",
    "#d55e00",
    "#009e73",
    "#cc79a7",
    "#e69f00",
    "#56b4e9",
    "#b8a600",
    "#000000",
    "#882255",
    "#44aa99",
    "#888888",
)
LABEL_EVERY_HOURS = (1, 2, 3, 6, 12, 24, 48, 168)  # the x axis's label spacing, the first fit
MAX_LABELS = 8

Link = Callable[[str, datetime, datetime], str]


def failures_link(code: str, since: datetime, until: datetime) -> str:
    """The audit list of the failures of ``code`` from ``since`` to ``until`` (the chart's
    window). The list filters by status and code; it has no filter by failure time, so the
    window is not in the address yet."""
    del since, until
    return f"/ui/audits?status=failed&code={quote(code, safe='')}"


def hour_of(moment: datetime) -> datetime:
    """The start of ``moment``'s hour."""
    return moment.replace(minute=0, second=0, microsecond=0)


def colour(code: str) -> str:
    place = ERROR_CODES.index(code) if code in ERROR_CODES else len(ERROR_CODES) - 1
    return PALETTE[place % len(PALETTE)]


def failure_chart(
    counts: Mapping[tuple[datetime, str], int],
    since: datetime,
    until: datetime,
    title: str,
    key: str,
    link: Link = failures_link,
) -> str:
    """A ``<figure>`` charting ``counts`` ((hour start, code) → failures, as
    :meth:`~projections.audits.AuditReads.failures_by_hour` gives them) from the hour of
    ``since`` to the hour of ``until``, one bar an hour, stacked by code (most failures
    overall at the bottom). ``key`` makes the element ids unique on the page."""
    slug = re.sub(r"[^A-Za-z0-9_-]", "-", key)
    first, last = hour_of(since), hour_of(until)
    hours = int((last - first) / HOUR) + 1
    shown = {(h, c): n for (h, c), n in counts.items() if first <= h <= last and n > 0}
    totals: dict[str, int] = {}
    for (_, code), n in shown.items():
        totals[code] = totals.get(code, 0) + n
    codes = sorted(totals, key=lambda c: (-totals[c], c))
    window = f"{_hour_text(since)} – {_hour_text(until)} UTC"
    head = (
        f'<figure class="chart" id="chart-{slug}" data-chart="{escape(key)}">'
        f'<figcaption id="chart-{slug}-caption">{escape(title)} '
        f"<small>({escape(window)})</small></figcaption>"
    )
    if not codes:
        return f'{head}<p class="none">No failures in this window.</p></figure>'
    by_hour: dict[datetime, dict[str, int]] = {}
    for (h, code), n in shown.items():
        by_hour.setdefault(h, {})[code] = n
    top, step = _scale(max(sum(v.values()) for v in by_hour.values()))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    bar_w = plot_w / hours
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'aria-labelledby="chart-{slug}-title chart-{slug}-desc">',
        f'<title id="chart-{slug}-title">{escape(title)}</title>',
        f'<desc id="chart-{slug}-desc">{escape(_describe(totals, codes, window))}</desc>',
    ]
    # the y axis: gridlines and counts, and its name
    for value in range(0, top + 1, step):
        y = TOP + plot_h - plot_h * value / top
        parts.append(
            f'<line class="grid" x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}"/>'
            f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{value}</text>'
        )
    parts.append(
        f'<text class="axis" transform="translate(12 {TOP + plot_h / 2:.0f}) rotate(-90)" '
        'text-anchor="middle">failures</text>'
    )
    # the x axis: hour labels at a spacing that fits, and its name
    every = next((n for n in LABEL_EVERY_HOURS if hours / n <= MAX_LABELS), LABEL_EVERY_HOURS[-1])
    for i in range(hours):
        start = first + i * HOUR
        if int(start.timestamp()) // 3600 % every:  # labels on round hours (UTC midnights)
            continue
        x = LEFT + bar_w * (i + 0.5)
        text = start.strftime("%m-%d" if every >= 24 else "%H:%M")
        parts.append(
            f'<line class="axis" x1="{x:.1f}" y1="{TOP + plot_h}" x2="{x:.1f}" '
            f'y2="{TOP + plot_h + 4}"/>'
            f'<text class="tick" x="{x:.1f}" y="{TOP + plot_h + 16}" '
            f'text-anchor="middle">{text}</text>'
        )
    parts.append(
        f'<line class="axis" x1="{LEFT}" y1="{TOP + plot_h}" x2="{WIDTH - RIGHT}" '
        f'y2="{TOP + plot_h}"/>'
        f'<text class="axis" x="{LEFT + plot_w / 2:.0f}" y="{HEIGHT - 4}" '
        'text-anchor="middle">hour (UTC)</text>'
    )
    # the bars: one an hour, its codes stacked in the legend's order; a code's parts of every
    # bar in one link (the list of its failures) and one colour, so the markup stays small
    names = {code: escape(code) for code in codes}
    drawn: dict[str, list[str]] = {code: [] for code in codes}
    width = f"{bar_w * 0.8:.1f}"
    for i in range(hours):
        start = first + i * HOUR
        here = by_hour.get(start)
        if not here:
            continue
        left = f"{LEFT + bar_w * i + bar_w * 0.1:.1f}"
        base = float(TOP + plot_h)
        stamp = start.strftime("%Y-%m-%dT%H:%MZ")
        span = f"{_hour_text(start)}–{(start + HOUR).strftime('%H:%M')} UTC"
        for code in codes:
            n = here.get(code, 0)
            if not n:
                continue
            height = plot_h * n / top
            base -= height
            drawn[code].append(
                f'<rect class="bar" data-hour="{stamp}" data-count="{n}" x="{left}" '
                f'y="{base:.1f}" width="{width}" height="{height:.1f}">'
                f"<title>{names[code]}: {n} failure{'s' if n != 1 else ''}, {span}</title></rect>"
            )
    for code in codes:
        parts.append(
            f'<a href="{escape(link(code, since, until))}" tabindex="-1" '
            f'data-code="{names[code]}"><g fill="{colour(code)}">{"".join(drawn[code])}</g></a>'
        )
    parts.append("</svg>")
    legend = [f'<ul class="legend" aria-label="{escape(title)}: error codes">']
    for code in codes:
        legend.append(
            f'<li data-code="{escape(code)}"><a href="{escape(link(code, since, until))}">'
            f'<svg class="swatch" width="12" height="12" aria-hidden="true">'
            f'<rect width="12" height="12" fill="{colour(code)}"/></svg> '
            f'{escape(code)} <span class="n">{totals[code]}</span></a></li>'
        )
    legend.append("</ul>")
    return head + "".join(parts) + "".join(legend) + "</figure>"


def _scale(peak: int) -> tuple[int, int]:
    """The y axis's top and tick step: 1, 2 or 5 times a power of ten, at most 5 ticks."""
    step = 1
    while True:
        for m in (1, 2, 5):
            if peak <= 5 * step * m:
                top = -(-peak // (step * m)) * step * m
                return top, step * m
        step *= 10


def _hour_text(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M")


def _describe(totals: Mapping[str, int], codes: list[str], window: str) -> str:
    every = ", ".join(f"{c} {totals[c]}" for c in codes)
    return f"Failures per hour, {window}: {sum(totals.values())} in all ({every})."
