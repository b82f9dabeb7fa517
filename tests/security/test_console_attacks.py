"""The console attacked from a web page, in a real headless Chromium against a real ``serve``,
on both backend pairs: an operator is signed in, and a page of another origin tries to fail an
audit (a cross-site form, a ``text/plain`` form of events, a ``no-cors`` fetch), to sign the
operator's browser in under another token (login CSRF), and to frame the console. The page is
served by a second HTTP server, from ``127.0.0.2`` (another site: ``SameSite`` applies) and from
``127.0.0.1`` on another port (the same site, another origin: only the CSRF tokens stand).
Everything must fail. The same pages of another origin also attack a default, open ``serve``
(no tokens, on loopback), where no token or session stands in their way: ``text/plain`` and
form posts and ``no-cors`` fetches to ``POST /audits/{id}/fail``, ``/events`` and ``/sweep``
change nothing. Also: logout ends the session on another replica, a proxy's
``X-Forwarded-Proto`` makes the cookie ``Secure`` only from a listed proxy, and no console page
raises a Content-Security-Policy violation while its live refresh works."""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.consumers.api.ui.conftest import Serve
from tests.consumers.api.ui.driving import figures, sign_in, sign_out, text_of
from tests.e2e.test_cli_e2e import AUDITREC
from tests.eventually import eventually_sync
from tests.security.conftest import OtherSite, serving

ADMIN = "admin-secret-0001"
VIEWER = "viewer-secret-0002"
JSON = {"content-type": "application/json"}


def admin(serve: Serve) -> httpx.Client:
    return httpx.Client(
        base_url=serve.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30
    )


def start_audit(serve: Serve, audit_id: str) -> None:
    event = {
        "type": "AuditStarted",
        "audit_id": audit_id,
        "producer": "crawler",
        "occurred_at": (datetime.now(UTC) - timedelta(minutes=5)).isoformat(),
        "data": {"project_id": "p1", "workflow_instance_id": f"wf-{audit_id}"},
    }
    with admin(serve) as client:
        assert client.post("/events", json=event).status_code == 202
        eventually_sync(
            lambda: client.get(f"/audits/{audit_id}", params={"probe": "false"}).status_code,
            until=lambda s: s == 200,
            timeout=60,
            message=f"{audit_id} projected",
        )


def record_of(serve: Serve, audit_id: str) -> tuple[str, list[str]]:
    with admin(serve) as client:
        row = client.get(f"/audits/{audit_id}", params={"probe": "false"}).json()
        history = client.get(f"/audits/{audit_id}/events").json()
    events = history["events"] if isinstance(history, dict) else history
    return row["status"], [e["type"] for e in events]


def attack_pages(api: str, audit_id: str) -> dict[str, str]:
    failed = json.dumps(
        [
            {
                "type": "AuditFailed",
                "audit_id": audit_id,
                "producer": "evil",
                "data": {"error_code": "oom", "failed_by": "workflow"},
            }
        ]
    )
    # a text/plain form sends "name=value": the name carries the JSON, the value closes it
    name, value = failed[:-2] + ', "x": "', '"}]'
    done = "document.title = 'done'"
    return {
        "/fail": f"""<form id="f" method="post" action="{api}/ui/audits/{audit_id}/fail">
<input name="code" value="oom"><input name="reason" value="forged">
<input name="csrf" value="guessed"></form>
<script>document.getElementById("f").submit()</script>""",
        "/events-form": f"""<form id="f" method="post" action="{api}/events"
enctype="text/plain"><input name='{name}' value='{value}'></form>
<script>document.getElementById("f").submit()</script>""",
        "/events-fetch": f"""<script>
const body = {json.dumps(failed)};
Promise.allSettled([
  fetch("{api}/events", {{method: "POST", mode: "no-cors", credentials: "include", body}}),
  fetch("{api}/events", {{method: "POST", credentials: "include", body,
    headers: {{"content-type": "application/json"}}}}),
  fetch("{api}/ui/audits/{audit_id}/fail", {{method: "POST", mode: "no-cors",
    credentials: "include", body: new URLSearchParams({{code: "oom", reason: "x"}})}}),
]).then(() => {{ {done} }});
</script>""",
        "/login": f"""<form id="f" method="post" action="{api}/ui/login">
<input name="token" value="{VIEWER}"><input name="next" value="/ui">
<input name="csrf" value="guessed"></form>
<script>document.getElementById("f").submit()</script>""",
        "/frame": f"""<iframe id="console" name="console" src="{api}/ui"
onload="{done}"></iframe>""",
    }


def left_for(driver: Any, url: str) -> None:
    """Open ``url`` and wait until its page has sent its form (the browser left it)."""
    driver.get(url)
    eventually_sync(
        lambda: driver.current_url,
        until=lambda u: not u.startswith(url),
        timeout=30,
        message=f"{url} to send its form",
    )


def titled(driver: Any, url: str) -> None:
    driver.get(url)
    eventually_sync(lambda: driver.title, until=lambda t: t == "done", timeout=30)


@pytest.mark.parametrize("site", ["127.0.0.2", "127.0.0.1"], ids=["cross-site", "same-site"])
def test_a_page_of_another_origin_can_neither_fail_an_audit_nor_sign_in_nor_frame_the_console(
    serve: Serve, browser: Any, site: str
) -> None:
    driver = browser
    audit_id = f"a-target-{uuid.uuid4().hex[:8]}"
    start_audit(serve, audit_id)
    sign_in(driver, serve, ADMIN)
    assert text_of(driver, "#who") == "signed in as admin"

    with OtherSite(site, attack_pages(serve.url, audit_id)) as other:
        # (a) fail the audit: a form with a guessed CSRF token, events as text/plain, fetches
        left_for(driver, f"{other.url}/fail")
        assert text_of(driver, "#refused") == "Not allowed"  # the 403 page
        why = text_of(driver, "#why")
        refusals = ("another site", "CSRF", "no valid session")  # no cookie is sent cross-site
        assert any(reason in why for reason in refusals), why
        left_for(driver, f"{other.url}/events-form")
        assert "application/json" in driver.find_element("tag name", "body").text  # 415
        titled(driver, f"{other.url}/events-fetch")
        assert record_of(serve, audit_id) == ("running", ["AuditStarted"])

        # (b) sign the operator's browser in under the attacker's token
        left_for(driver, f"{other.url}/login")
        driver.get(f"{serve.url}/ui")
        assert text_of(driver, "#who") == "signed in as admin"

        # (c) frame the console: the browser refuses to show it (CSP frame-ancestors, DENY)
        titled(driver, f"{other.url}/frame")
        driver.switch_to.frame("console")
        driver.implicitly_wait(0)
        try:
            shown = driver.find_elements("css selector", "header, #who, #login, main")
        finally:
            driver.switch_to.default_content()
            driver.implicitly_wait(10)
        assert shown == []

    assert record_of(serve, audit_id) == ("running", ["AuditStarted"])


def open_attack_pages(api: str, audit_id: str) -> dict[str, str]:
    """Pages that post to an open API what a browser sends without asking: ``text/plain`` and
    form-encoded bodies (a JSON body smuggled into a ``text/plain`` form's name and value),
    and ``no-cors`` fetches (no body, ``text/plain``, form-encoded)."""
    events = json.dumps(
        [
            {
                "type": "AuditFailed",
                "audit_id": audit_id,
                "producer": "evil",
                "data": {"error_code": "oom", "failed_by": "workflow"},
            }
        ]
    )
    fail = json.dumps({"code": "oom", "reason": "forged"})
    targets = {
        "fail": (f"{api}/audits/{audit_id}/fail", fail),
        "events": (f"{api}/events", events),
        "sweep": (f"{api}/sweep", json.dumps({"dry_run": False})),
    }
    pages = {}
    for what, (url, body) in targets.items():
        # a text/plain form sends "name=value": the name carries the JSON, the value closes it
        name, value = body[:-1] + ', "x": "', '"}'
        if body.endswith("]"):
            name, value = body[:-2] + ', "x": "', '"}]'
        pages[f"/{what}-plain"] = f"""<form id="f" method="post" action="{url}"
enctype="text/plain"><input name='{name}' value='{value}'></form>
<script>document.getElementById("f").submit()</script>"""
        pages[f"/{what}-form"] = f"""<form id="f" method="post" action="{url}">
<input name="code" value="oom"><input name="reason" value="forged"></form>
<script>document.getElementById("f").submit()</script>"""
        pages[f"/{what}-fetch"] = f"""<script>
const body = {json.dumps(body)};
Promise.allSettled([
  fetch("{url}", {{method: "POST", mode: "no-cors"}}),
  fetch("{url}", {{method: "POST", mode: "no-cors", body}}),
  fetch("{url}", {{method: "POST", mode: "no-cors", credentials: "include",
    headers: {{"content-type": "text/plain"}}, body}}),
  fetch("{url}", {{method: "POST", mode: "no-cors",
    body: new URLSearchParams({{code: "oom", reason: "forged"}})}}),
]).then(() => {{ document.title = 'done' }});
</script>"""
    return pages


def sweeps_run(url: str) -> float:
    """Sweeps the API ran (``auditrec_sweep_duration_seconds_count``; none yet: 0)."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    found = re.search(r"^auditrec_sweep_duration_seconds_count (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


@pytest.mark.parametrize("site", ["127.0.0.2", "127.0.0.1"], ids=["cross-site", "same-site"])
def test_a_page_of_another_origin_changes_nothing_on_an_open_serve(
    console_env: dict[str, str], browser: Any, tmp_path: Path, site: str
) -> None:
    # given a default serve: no tokens, on loopback
    env = {
        k: v
        for k, v in console_env.items()
        if k not in ("AUDITREC_API_TOKENS", "AUDITREC_API_PUBLIC_READYZ")
    }
    assert subprocess.run([AUDITREC, "init"], env=env, timeout=120).returncode == 0
    with (
        serving(env, tmp_path / "open-serve.log") as api,
        httpx.Client(base_url=api, timeout=60) as client,
    ):
        audit_id = f"a-open-{uuid.uuid4().hex[:8]}"
        started = {
            "type": "AuditStarted",
            "audit_id": audit_id,
            "producer": "crawler",
            "occurred_at": (datetime.now(UTC) - timedelta(minutes=5)).isoformat(),
            "data": {"project_id": "p1", "workflow_instance_id": f"wf-{audit_id}"},
        }
        assert client.post("/events", json=started).status_code == 202

        def record() -> tuple[str, list[str]]:
            row = client.get(f"/audits/{audit_id}", params={"probe": "false"})
            if row.status_code != 200:
                return "", []
            history = client.get(f"/audits/{audit_id}/events").json()
            events = history["events"] if isinstance(history, dict) else history
            return row.json()["status"], [e["type"] for e in events]

        untouched = ("running", ["AuditStarted"])
        eventually_sync(record, until=lambda r: r == untouched, timeout=60, message="projected")
        assert sweeps_run(api) == 0

        # when a page of another origin posts forms and no-cors fetches to the API
        pages = open_attack_pages(api, audit_id)
        with OtherSite(site, pages) as other:
            for path in pages:
                if path.endswith("-fetch"):
                    titled(browser, f"{other.url}{path}")
                else:
                    left_for(browser, f"{other.url}{path}")
                    answer = browser.find_element("tag name", "body").text
                    assert "needs Content-Type: application/json" in answer, (path, answer)

        # then the audit is as it was and no sweep ran
        fresh = client.post("/events", json={**started, "audit_id": f"{audit_id}-later"})
        assert fresh.status_code == 202  # what was published before it is projected once it is
        eventually_sync(
            lambda: client.get(f"/audits/{audit_id}-later", params={"probe": "false"}).status_code,
            until=lambda s: s == 200,
            timeout=60,
            message="the later audit projected",
        )
        assert record() == untouched
        assert sweeps_run(api) == 0
        # and the metric does count a sweep the API is asked for with a JSON content type
        assert client.post("/sweep", headers=JSON).status_code == 200
        assert sweeps_run(api) == 1


def console_cookie(serve: Serve, token: str) -> httpx.Client:
    """A client signed in to the console with ``token`` through its sign-in form."""
    client = httpx.Client(base_url=serve.url, timeout=30)
    form = client.get("/ui/login").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', form)
    assert csrf is not None
    signed = client.post("/ui/login", data={"token": token, "csrf": csrf.group(1)})
    assert signed.status_code == 303, signed.text[:500]
    return client


def test_logout_ends_the_tokens_sessions_on_every_replica_copied_cookies_included(
    serve: Serve, tmp_path: Path
) -> None:
    with serving(serve.env, tmp_path / "replica.log", "--only", "api", token=ADMIN) as replica:
        here = console_cookie(serve, ADMIN)
        cookie = here.cookies["auditrec_console"]
        there = httpx.Client(base_url=replica, timeout=30)
        there.cookies.set("auditrec_console", cookie, path="/ui")
        assert there.get("/ui").status_code == 200  # the replica accepts the session
        page = here.get("/ui").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        assert csrf is not None

        out = here.post("/ui/logout", data={"csrf": csrf.group(1)})

        assert out.status_code == 303
        stale = httpx.Client(base_url=serve.url, timeout=30)
        stale.cookies.set("auditrec_console", cookie, path="/ui")  # a copy kept before
        for client in (stale, there):
            answer = client.get("/ui")
            assert answer.status_code == 303, answer.text[:300]
            assert answer.headers["location"].startswith("/ui/login")
        assert console_cookie(serve, ADMIN).get("/ui").status_code == 200  # a new sign-in
        for client in (here, there, stale):
            client.close()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_no_console_page_violates_its_csp_and_the_overview_refreshes_live(
    serve: Serve, browser: Any
) -> None:
    driver = browser
    driver.execute_cdp_cmd(
        "Page.addScriptToEvaluateOnNewDocument",
        {
            "source": "window.__violations = [];"
            "document.addEventListener('securitypolicyviolation', e => "
            "window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));"
        },
    )
    audit_id = f"a-live-{uuid.uuid4().hex[:8]}"
    start_audit(serve, audit_id)
    driver.get(f"{serve.url}/ui/login")
    assert driver.execute_script("return window.__violations") == []
    sign_in(driver, serve, ADMIN)
    for path in ("/ui/audits", f"/ui/audits/{audit_id}", "/ui/dead-letters", "/ui/backtest"):
        driver.get(f"{serve.url}{path}")
        assert driver.execute_script("return window.__violations") == [], path

    driver.get(f"{serve.url}/ui")
    before = int(figures(driver)["running"])
    start_audit(serve, f"a-live-{uuid.uuid4().hex[:8]}")
    running = "return document.querySelector('.card[data-status=running] .figure').textContent"
    eventually_sync(
        lambda: int(driver.execute_script(running)),
        until=lambda n: n == before + 1,
        timeout=30,
        message="the overview to show the new audit without a reload",
    )
    assert driver.execute_script("return document.querySelector('main').dataset.refreshed")
    assert driver.execute_script("return window.__violations") == []
    sign_out(driver)
