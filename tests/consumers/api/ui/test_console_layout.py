"""The console's layout and keyboard use in a real browser against a real ``auditrec serve``, on
both backend pairs: every page at 400 px and at 1366 px without sideways scrolling (a wide table
scrolls inside itself), "Log out" within reach on a narrow screen, every form field labelled, no
control that is not what it looks like; the overview walked with the Tab key (a skip link first,
the navigation in order with the current page marked, a visible focus on each stop) and the
audits list's every control reached by Tab in reading order. The documentation's screenshots
are taken here (``make screenshots``): the overview during an incident (the brake engaged), an
audit page, the dead letters, and the overview at 400 px."""

from __future__ import annotations

import asyncio
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from consumers.workflows.simulator.server import SimulatorServer
from tests.consumers.api.ui.conftest import Serve, screenshot
from tests.consumers.api.ui.dataset import append_poison, publish_known_data_set
from tests.consumers.api.ui.driving import sign_in, sign_out, submit, text_of
from tests.e2e.test_cli_e2e import AUDITREC, envelope
from tests.eventually import eventually_sync

NARROW, WIDE = 400, 1366
# An id and a URL with no place to break: they must wrap, not widen the page.
LONG_ID = "a-" + "long" * 30
LONG_URL = "https://example.com/" + "deep/" * 60 + "page"
NAVIGATION = ["Overview", "Audits", "Dead letters", "Deliveries", "Orphans", "Backtest"]


def at_width(driver: Any, width: int) -> None:
    driver.set_window_size(width, 900)
    viewport = driver.execute_script("return window.innerWidth")
    assert viewport == width, f"the window is {viewport} px wide, not {width}"


def sideways(driver: Any) -> tuple[int, int, list[str]]:
    """The page's scroll width, its viewport width, and what sticks out past the viewport."""
    return tuple(  # type: ignore[return-value]
        driver.execute_script(
            """
            const root = document.documentElement, edge = root.clientWidth;
            const out = [];
            for (const el of document.body.querySelectorAll("*")) {
              const r = el.getBoundingClientRect();
              if (r.width && r.right > edge + 0.5 && !el.closest("table, pre")) {
                out.push(el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") +
                         (el.className && el.className.baseVal === undefined ?
                          "." + el.className : "") + " right=" + Math.round(r.right));
              }
            }
            return [root.scrollWidth, edge, out.slice(0, 8)];
            """
        )
    )


def assert_fits(driver: Any, width: int, where: str) -> None:
    scroll_width, client_width, sticking_out = sideways(driver)
    assert client_width <= width
    assert scroll_width <= client_width, (
        f"{where} at {width} px scrolls sideways: {scroll_width} px wide in {client_width} px; "
        f"sticking out: {sticking_out}"
    )


def assert_log_out_reachable(driver: Any, where: str) -> None:
    button = driver.find_element("css selector", "form.logout button")
    assert button.is_displayed(), f"Log out is hidden on {where}"
    left, right, top = driver.execute_script(
        "const r = arguments[0].getBoundingClientRect(); return [r.left, r.right, r.top];", button
    )
    edge = driver.execute_script("return document.documentElement.clientWidth")
    assert left >= 0 and right <= edge, (
        f"Log out is off-screen on {where} ({left}–{right} of {edge})"
    )
    assert top < 400, f"Log out is {top} px down on {where}"


def unlabelled(driver: Any) -> list[str]:
    """The form fields a screen reader would announce without a name."""
    return list(
        driver.execute_script(
            """
            const fields = document.querySelectorAll(
              "input:not([type=hidden]):not([type=submit]), select, textarea");
            return [...fields].filter(f =>
              !(f.labels && f.labels.length) && !f.getAttribute("aria-label") &&
              !f.getAttribute("aria-labelledby") && !f.title
            ).map(f => f.outerHTML.slice(0, 120));
            """
        )
    )


def not_keyboard_friendly(driver: Any) -> list[str]:
    """Controls that are not what they look like, or that take the focus out of order: a
    positive tabindex, a click handler or a button role on something that is no button."""
    return list(
        driver.execute_script(
            """
            const bad = document.querySelectorAll(
              '[onclick], [role=button]:not(button), [role=link]:not(a)');
            const jumpy = [...document.querySelectorAll('[tabindex]')].filter(e => e.tabIndex > 0);
            return [...bad, ...jumpy].map(e => e.outerHTML.slice(0, 120));
            """
        )
    )


def publish_long_audit(serve: Serve) -> None:
    now = datetime.now(UTC) - timedelta(minutes=1)
    line = envelope("AuditStarted", LONG_ID, now, project_id="p-" + "x" * 120, start_url=LONG_URL)
    published = subprocess.run(
        [AUDITREC, "publish", "-"],
        env=serve.env,
        input=line + "\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert published.returncode == 0, published.stderr


def test_every_page_fits_400_and_1366_px_and_the_overview_works_by_keyboard(
    serve: Serve, simulator: SimulatorServer, browser: Any, tmp_path: Path
) -> None:
    driver = browser
    asyncio.run(append_poison(serve))
    publish_known_data_set(serve, simulator)  # the brake engaged: four failures held
    publish_long_audit(serve)

    # the sign-in page, before any session
    for width in (NARROW, WIDE):
        at_width(driver, width)
        driver.get(f"{serve.url}/ui/login")
        assert_fits(driver, width, "the sign-in page")
        assert unlabelled(driver) == []

    sign_in(driver, serve, "admin-secret-0001")

    def long_audit_listed() -> bool:
        driver.get(f"{serve.url}/ui/audits")
        return bool(driver.find_elements("css selector", f'tr[data-audit="{LONG_ID}"]'))

    eventually_sync(long_audit_listed, timeout=60, interval=0.5, message="the long audit")
    driver.get(f"{serve.url}/ui/dead-letters")
    letter = driver.find_element("css selector", "#dead-letters tbody tr[data-position] a")
    pages = {
        "the overview": "/ui",
        "the audits": "/ui/audits",
        "a filtered list": "/ui/audits?status=running&project=p2",
        "an audit": "/ui/audits/a-oom",
        "an audit with a long id": f"/ui/audits/{LONG_ID}",
        "a held audit": "/ui/audits/a-lost-0",
        "the dead letters": "/ui/dead-letters",
        "a dead letter": letter.get_attribute("href").removeprefix(serve.url),
        "the deliveries": "/ui/deliveries",
        "the orphans": "/ui/orphans",
        "a backtest": "/ui/backtest?set=INSTANCE_LOST_GRACE%3D5h",
    }
    for width in (NARROW, WIDE):
        at_width(driver, width)
        for where, path in pages.items():
            driver.get(f"{serve.url}{path}")
            assert driver.find_elements("css selector", "main h1"), f"{where}: no page"
            assert_fits(driver, width, where)
            if width == NARROW:
                assert_log_out_reachable(driver, where)
            assert not_keyboard_friendly(driver) == [], where
            assert unlabelled(driver) == [], f"unlabelled fields on {where}"

    # the pages a form leads to at 400 px: the brake's and a bulk action's previews (nothing
    # changes before a confirm), and a refusal
    at_width(driver, NARROW)
    driver.get(f"{serve.url}/ui")
    driver.find_element(
        "css selector", 'form[action="/ui/brake/release"] input[name="reason"]'
    ).send_keys("provider blip over")
    submit(driver, "brake-release")
    assert text_of(driver, "#preview-count") == "4"
    assert_fits(driver, NARROW, "the brake's preview")
    assert_log_out_reachable(driver, "the brake's preview")
    driver.get(f"{serve.url}/ui/audits?status=running&project=p2")
    driver.find_element("css selector", "#bulk summary").click()
    driver.find_element(
        "css selector", 'form[action="/ui/bulk/restore"] input[name="reason"]'
    ).send_keys("a reason")
    assert_fits(driver, NARROW, "the bulk forms")
    submit(driver, "bulk-restore")
    assert_fits(driver, NARROW, "a bulk preview")
    unknown = LONG_ID.replace("a-", "z-", 1)
    driver.get(f"{serve.url}/ui/audits/{unknown}")
    assert unknown in text_of(driver, "#why")
    assert_fits(driver, NARROW, "a refusal")
    assert_log_out_reachable(driver, "a refusal")
    driver.get(f"{serve.url}/ui")
    assert text_of(driver, "#brake-state") == "engaged"  # the preview changed nothing

    # a wide table scrolls inside itself at 400 px, its last column still reachable
    driver.get(f"{serve.url}/ui/audits")
    inner, outer = driver.execute_script(
        "const t = document.getElementById('audits'); return [t.scrollWidth, t.clientWidth];"
    )
    assert inner > outer, "the audits table was expected to be wider than a 400 px screen"
    assert driver.execute_script(
        "return getComputedStyle(document.getElementById('audits')).overflowX"
    ) in ("auto", "scroll")

    # the overview by keyboard, at either width: the skip link first, then the navigation in
    # order with the current page marked, "Log out", the page's own links; each stop visible
    for width in (NARROW, WIDE):
        at_width(driver, width)
        stops = walk(driver, f"{serve.url}/ui", 24)
        assert stops[0]["text"] == "Skip to content"
        texts = [s["text"] for s in stops]
        start = texts.index("Overview")
        assert texts[start : start + len(NAVIGATION)] == NAVIGATION
        assert "Log out" in texts[start + len(NAVIGATION) :]
        assert any(s["href"].endswith("/ui/audits?status=running") for s in stops), texts
        for stop in stops:
            assert stop["focusVisible"] and stop["outline"] != "none", f"no focus ring: {stop}"
            assert stop["outlineWidth"] >= 2 and stop["onScreen"], f"focus not seen: {stop}"
        assert [s["current"] for s in stops if s["text"] in NAVIGATION] == [
            "page",
            None,
            None,
            None,
            None,
            None,
        ]
    # the skip link moves the focus past the navigation, to the page itself
    stops = walk(driver, f"{serve.url}/ui", 2, enter_after=1)
    assert stops[0]["text"] == "Skip to content"
    assert stops[1]["inMain"], stops[1]
    # every control of a page is reached by Tab, in the order it is read (the audits list: its
    # filters, the bulk actions' summary, each audit's link, any sortable heading)
    order, expected = tab_order(driver, f"{serve.url}/ui/audits")
    assert order == expected, f"tab order {order}"

    # on an audit page the Audits link is the current section
    driver.get(f"{serve.url}/ui/audits/a-oom")
    assert text_of(driver, 'nav a[aria-current="true"]') == "Audits"

    # the screenshots of the documentation: an incident (the brake engaged), an audit page
    driver.get(f"{serve.url}/ui")
    assert text_of(driver, "#brake-state") == "engaged"
    screenshot(driver, tmp_path, "overview")
    driver.get(f"{serve.url}/ui/audits/a-oom")
    screenshot(driver, tmp_path, "audit")
    driver.get(f"{serve.url}/ui/dead-letters")
    screenshot(driver, tmp_path, "dead-letters")
    driver.get(f"{serve.url}/ui")
    screenshot(driver, tmp_path, "overview-400px", width=NARROW)
    sign_out(driver)


# What takes the focus with Tab, in document order (the content of a closed <details> is not
# rendered, so it is left out).
FOCUSABLE = """
  const wanted = 'a[href], button:not([disabled]), input:not([type=hidden]):not([disabled]), ' +
    'select:not([disabled]), textarea:not([disabled]), details > summary, ' +
    '[tabindex]:not([tabindex="-1"])';
  const focusable = [...document.querySelectorAll(wanted)].filter(
    e => e.checkVisibility({visibilityProperty: true}) && e.tabIndex >= 0);
"""


def walk(
    driver: Any, url: str, count: int, *, enter_after: int | None = None
) -> list[dict[str, Any]]:
    """Open ``url`` and press Tab ``count`` times (Enter after the ``enter_after``-th), telling
    each stop (see :func:`stops_of`). A page that refreshes itself replaces what has the focus:
    a walk the refresh fell into is walked again."""
    for _ in range(5):
        driver.get(url)
        before = refreshed(driver)
        stops = stops_of(driver, count, enter_after=enter_after)
        if refreshed(driver) == before:
            return stops
    raise AssertionError(f"{url} refreshed itself during every walk")


def refreshed(driver: Any) -> str | None:
    script = "return document.querySelector('main').dataset.refreshed"
    return driver.execute_script(script)  # type: ignore[no-any-return]


def tab_order(driver: Any, url: str) -> tuple[list[int], list[int]]:
    """The order Tab visits ``url``'s controls in, numbered in document order, and the
    document order itself."""
    for _ in range(5):
        driver.get(url)
        before = refreshed(driver)
        total = driver.execute_script(
            FOCUSABLE + "focusable.forEach((e, i) => e.dataset.tabOrder = i); "
            "return focusable.length;"
        )
        order = [
            int(stop["order"]) if stop["order"] is not None else -1
            for stop in stops_of(driver, total)
        ]
        if refreshed(driver) == before:
            return order, list(range(total))
    raise AssertionError(f"{url} refreshed itself during every walk")


def stops_of(driver: Any, count: int, *, enter_after: int | None = None) -> list[dict[str, Any]]:
    """Press Tab ``count`` times from the top of the page and describe each element that
    takes the focus: its text, link, ``aria-current``, focus outline and place."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    driver.execute_script("document.activeElement && document.activeElement.blur()")
    stops = []
    for n in range(count):
        if n == enter_after:
            ActionChains(driver).send_keys(Keys.ENTER).perform()
            assert driver.switch_to.active_element.get_attribute("id") == "main"
        ActionChains(driver).send_keys(Keys.TAB).perform()
        stops.append(
            driver.execute_script(
                """
                const el = document.activeElement, style = getComputedStyle(el);
                return {text: (el.innerText || el.value || "").trim(),
                        href: el.href || "", current: el.getAttribute("aria-current"),
                        outline: style.outlineStyle,
                        outlineWidth: parseFloat(style.outlineWidth),
                        focusVisible: el.matches(":focus-visible"),
                        inMain: !!el.closest("main"), order: el.dataset.tabOrder ?? null,
                        onScreen: (r => r.width > 0 && r.left >= 0 &&
                                   r.right <= document.documentElement.clientWidth)(
                                   el.getBoundingClientRect())};
                """
            )
        )
    return stops
