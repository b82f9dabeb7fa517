"""Driving the console's pages in the browser: sign in and out, submit a form and wait for the
page it leads to, read figures and tables."""

from __future__ import annotations

from typing import Any

from tests.consumers.api.ui.conftest import Serve
from tests.eventually import eventually_sync

__all__ = ["figures", "sign_in", "sign_out", "submit", "table", "text_of"]


def submit(driver: Any, button_id: str) -> None:
    """Click a form's button and wait for the page it leads to (the old one goes stale)."""
    from selenium.webdriver.support.ui import WebDriverWait

    old = driver.find_element("tag name", "html")
    driver.find_element("id", button_id).click()
    WebDriverWait(driver, 30).until(lambda _: _gone(old))


def _gone(element: Any) -> bool:
    """Whether ``element``'s page has been replaced. Chromium reports an element of a page
    just left either as stale or, while the new one loads, as a node that "does not belong to
    the document" (a plain WebDriverException, which ``staleness_of`` would let through)."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as exc:
        if "does not belong to the document" in str(exc):
            return True
        raise
    return False


def text_of(driver: Any, css: str) -> str:
    return str(driver.find_element("css selector", css).text)


def sign_in(driver: Any, serve: Serve, token: str, then: str = "/ui") -> None:
    driver.get(f"{serve.url}{then}")
    assert "/ui/login" in driver.current_url  # no session: the login form, coming back after
    driver.find_element("id", "token").send_keys(token)
    driver.find_element("css selector", "#login button").click()
    eventually_sync(lambda: driver.current_url, until=lambda u: "/ui/login" not in u, timeout=15)


def sign_out(driver: Any) -> None:
    driver.find_element("css selector", "form.logout button").click()
    eventually_sync(lambda: driver.current_url, until=lambda u: "/ui/login" in u, timeout=15)


def figures(driver: Any) -> dict[str, str]:
    cards = driver.find_elements("css selector", "#by-status .card")
    return {
        c.get_attribute("data-status"): c.find_element("css selector", ".figure").text
        for c in cards
    }


def table(driver: Any, css: str, key: str) -> dict[str, str]:
    rows = driver.find_elements("css selector", f"{css} tbody tr[{key}]")
    return {r.get_attribute(key): r.find_element("css selector", "td.n").text for r in rows}
