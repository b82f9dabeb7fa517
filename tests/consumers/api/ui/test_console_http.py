"""The console over plain HTTP against a live API (no browser needed): the open console when
no token is configured, the refusals of forms, the login's redirect target, and the pages'
answers to bad input."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from consumers.api.ui.pages import PAGE_SIZE
from consumers.eventlog.codec import dead_letter, encode
from consumers.eventlog.port import Record
from consumers.workflows.simulator.server import SimulatorServer
from tests.consumers.api.conftest import (
    API_AND_PIPELINE,
    JSON,
    LiveServer,
    publish,
    server_settings,
    started,
)
from tests.contracts.projection_store import completed, failed
from tests.contracts.projection_store import started as started_event
from tests.eventually import eventually, eventually_sync


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF token in the page"
    return found.group(1)


def test_without_tokens_the_console_is_open_and_its_forms_still_need_their_session(
    tmp_path: Path, simulator: SimulatorServer
) -> None:
    with (
        LiveServer(["api"], **server_settings(tmp_path, simulator)) as live,
        httpx.Client(base_url=live.url) as client,
    ):
        overview = client.get("/ui")
        assert overview.status_code == 200 and "Overview" in overview.text
        assert "Log out" not in overview.text  # nobody to sign out
        cookie = overview.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
        assert client.get("/ui/login", follow_redirects=False).headers["location"] == "/ui"
        # a form with the page's CSRF token and its cookie is done (a dry run here) ...
        token = csrf_of(client.get("/ui/audits").text)
        preview = client.post("/ui/brake/discard", data={"csrf": token})
        assert preview.status_code == 200 and "Preview: discard" in preview.text
        # ... without the cookie, or with a token not of this session, it is refused
        bare = httpx.post(f"{live.url}/ui/brake/discard", data={"csrf": token})
        assert bare.status_code == 403 and "no valid session" in bare.text
        other = httpx.Client(base_url=live.url)
        other.get("/ui")
        crossed = other.post("/ui/brake/discard", data={"csrf": token})
        assert crossed.status_code == 403 and "CSRF" in crossed.text
        other.close()


def test_pages_answer_bad_input_naming_it_and_login_never_leaves_the_console(
    tmp_path: Path, simulator: SimulatorServer
) -> None:
    settings = server_settings(tmp_path, simulator, api_tokens="ops:op-secret-0123456789:operate")
    with (
        LiveServer(["api"], **settings) as live,
        httpx.Client(base_url=live.url) as client,
    ):
        assert client.get("/ui/audits").headers["location"] == "/ui/login?next=%2Fui%2Faudits"
        login = client.get("/ui/login", params={"next": "//evil.example/x"})
        assert 'name="next" value="/ui"' in login.text
        forged = client.post(
            "/ui/login", data={"token": "op-secret-0123456789", "next": "/ui", "csrf": "x"}
        )
        assert forged.status_code == 403 and "auditrec_console" not in forged.headers.get(
            "set-cookie", ""
        )
        signed = client.post(
            "/ui/login",
            data={
                "token": "op-secret-0123456789",
                "next": "https://evil.example/",
                "csrf": csrf_of(login.text),
            },
        )
        assert signed.status_code == 303 and signed.headers["location"] == "/ui"
        assert "op-secret-0123456789" not in signed.headers["set-cookie"]
        # the API itself still wants its bearer token: the console's cookie is not one
        assert client.get("/audits").status_code == 401
        bad = client.get("/ui/audits", params={"running_longer_than": "soon", "code": "nope"})
        assert bad.status_code == 422
        assert "running longer than:" in bad.text and "unknown code &#39;nope&#39;" in bad.text
        assert client.get("/ui/audits/a-nobody").status_code == 404
        assert client.get("/ui/audits/not%20an%20id").status_code == 422
        assert client.get("/ui/dead-letters/x:y").status_code == 422
        refused = client.post("/ui/audits/a-nobody/fail", data={"csrf": "x"})
        assert refused.status_code == 403
        token = csrf_of(client.get("/ui").text)
        unknown = client.post(
            "/ui/audits/a-nobody/fail", data={"csrf": token, "code": "oom", "reason": "r"}
        )
        assert unknown.status_code == 404 and "unknown audit" in unknown.text
        out = client.post("/ui/logout", data={"csrf": token})
        assert out.status_code == 303 and 'auditrec_console=""' in out.headers["set-cookie"]


def test_a_sign_in_csrf_cookie_the_server_did_not_make_is_refused_matching_field_or_not(
    tmp_path: Path, simulator: SimulatorServer
) -> None:
    """A sibling subdomain may set a cookie for the parent domain: the double submit alone
    would then accept its value, repeated in a form of its own making; nor may its page send
    a pair the server made (the browser marks its post ``Sec-Fetch-Site: same-site``)."""
    settings = server_settings(tmp_path, simulator, api_tokens="ops:op-secret-0123456789:operate")
    planted = "planted-by-a-sibling-0123456789abcdef"
    with LiveServer(["api"], **settings) as live, httpx.Client(base_url=live.url) as client:
        refused = client.post(
            "/ui/login",
            data={"token": "op-secret-0123456789", "next": "/ui", "csrf": planted},
            headers={"Cookie": f"auditrec_login={planted}"},
        )
        form = client.get("/ui/login", headers={"Cookie": f"auditrec_login={planted}"})
        made = csrf_of(form.text)
        # a pair the server made, fetched and planted by a sibling's page: the browser says so
        sibling = client.post(
            "/ui/login",
            data={"token": "op-secret-0123456789", "next": "/ui", "csrf": made},
            headers={"Cookie": f"auditrec_login={made}", "Sec-Fetch-Site": "same-site"},
        )
        signed = client.post(
            "/ui/login",
            data={"token": "op-secret-0123456789", "next": "/ui", "csrf": made},
            headers={"Cookie": f"auditrec_login={made}", "Sec-Fetch-Site": "same-origin"},
        )

    assert refused.status_code == 403 and "came from elsewhere" in refused.text
    assert sibling.status_code == 403 and "auditrec_console" not in sibling.headers.get(
        "set-cookie", ""
    )
    assert "auditrec_console" not in refused.headers.get("set-cookie", "")
    assert made != planted  # the form is given a token of the server's, not the planted one
    assert f"auditrec_login={made}" in form.headers["set-cookie"]
    assert signed.status_code == 303 and "auditrec_console=" in signed.headers["set-cookie"]


def test_the_audits_page_pages_by_keyset_and_filters_what_shadow_mode_would_fail(
    tmp_path: Path, simulator: SimulatorServer
) -> None:
    old = datetime.now(UTC) - timedelta(hours=2)
    started = [
        {
            "type": "AuditStarted",
            "audit_id": f"a-{i:03d}",
            "occurred_at": (old + timedelta(seconds=i)).isoformat(),
            "data": {"project_id": "p", "workflow_instance_id": f"wf-{i:03d}"},
        }
        for i in range(PAGE_SIZE + 5)
    ]
    for i in range(PAGE_SIZE + 5):
        if i not in (7, 9):  # their instances are gone: shadow mode would fail them
            simulator.sim.set_instance(f"wf-{i:03d}", "running")
    settings = server_settings(tmp_path, simulator, mode="shadow", sweep_wait="30s")
    with LiveServer(API_AND_PIPELINE, **settings) as live, live.client() as client:
        live.wait_pipeline_live()
        assert client.post("/events", json=started).status_code == 202
        swept = client.post("/sweep", headers=JSON)
        assert swept.status_code == 200, swept.text
        assert swept.json()["pending"] == 0

        first = client.get("/ui/audits")
        ids = re.findall(r'<tr data-audit="([^"]+)"', first.text)
        assert ids == [f"a-{i:03d}" for i in range(PAGE_SIZE + 4, 4, -1)]  # newest first
        found = re.search(r'id="next-page" href="([^"]+)"', first.text)
        assert found, "no link to the next page"
        second = client.get(found.group(1).replace("&amp;", "&"))
        assert re.findall(r'<tr data-audit="([^"]+)"', second.text) == [
            f"a-{i:03d}" for i in range(4, -1, -1)
        ]
        assert 'id="next-page"' not in second.text

        shadow = client.get("/ui/audits", params={"shadow": "on"})
        assert re.findall(r'<tr data-audit="([^"]+)"', shadow.text) == ["a-009", "a-007"]
        assert 'name="shadow" value="on" checked' in shadow.text


def test_an_audits_status_is_never_older_than_its_timeline(
    tmp_path: Path, simulator: SimulatorServer
) -> None:
    # given a running audit, and a projector that commits the audit's failure while its page
    # is being read (here: just before the page reads the history)
    with (
        LiveServer(["api", "projector"], **server_settings(tmp_path, simulator)) as live,
        live.client() as client,
    ):
        publish(client, started("a-race"))
        eventually_sync(
            lambda: client.get("/audits/a-race", params={"probe": "false"}).status_code,
            until=lambda status: status == 200,
            timeout=30,
            message="the audit projected",
        )
        backends = live.backends
        assert backends is not None
        read_history = backends.store.audits.history

        async def history(audit_id: str) -> Any:
            if (await backends.store.audits.get(audit_id)).status == "running":  # type: ignore[union-attr]
                await backends.log.append(
                    [encode(backends.log.topics.lifecycle, failed(audit_id, datetime.now(UTC)))]
                )
                await eventually(
                    lambda: backends.store.audits.get(audit_id),
                    until=lambda row: row is not None and row.status == "failed",
                    timeout=30,
                    message="the failure projected",
                )
            return await read_history(audit_id)

        backends.store.audits.history = history  # type: ignore[method-assign]

        # when the audit's page is read
        page = client.get("/ui/audits/a-race")

    # then the timeline ends with the failure, and the status shown is the failure's
    assert page.status_code == 200
    assert (
        re.findall(r'<tr class="step[^"]*"[^>]*data-type="(\w+)"', page.text)[-1] == "AuditFailed"
    )
    assert re.search(r'id="current-status">(\w+)<', page.text).group(1) == "failed"  # type: ignore[union-attr]


def test_the_audit_page_offers_the_actions_the_transition_table_allows(
    tmp_path: Path, simulator: SimulatorServer
) -> None:
    # given audits running, completed, failed by their workflow and failed by an operator
    now = datetime.now(UTC)
    events = [started_event(a, now) for a in ("a-run", "a-done", "a-wf", "a-op")]
    events += [completed("a-done", now), failed("a-wf", now), failed("a-op", now, by="operator")]
    with (
        LiveServer(["api", "projector"], **server_settings(tmp_path, simulator)) as live,
        live.client() as client,
    ):
        log = live.backends.log if live.backends is not None else None
        assert log is not None
        live.call(lambda: log.append([encode(log.topics.lifecycle, e) for e in events]))
        eventually_sync(
            lambda: client.get("/audits/a-op", params={"probe": "false"}).json(),
            until=lambda body: body.get("status") == "failed",
            timeout=30,
            message="the audits projected",
        )
        # when each audit's page is read
        pages = {a: client.get(f"/ui/audits/{a}").text for a in ("a-run", "a-done", "a-wf", "a-op")}

    # then only a running audit can be failed (or probed), and only auditrec's own failure
    # (here an operator's) restored; a workflow's failure and a completion offer nothing
    offered = {a: re.findall(r'id="(fail|probe|restore)"', html) for a, html in pages.items()}
    assert offered == {
        "a-run": ["fail", "probe"],
        "a-done": [],
        "a-wf": [],
        "a-op": ["restore"],
    }


def test_the_console_refuses_with_the_json_apis_statuses(
    tmp_path: Path, simulator: SimulatorServer
) -> None:
    # given a running audit
    with (
        LiveServer(["api", "projector"], **server_settings(tmp_path, simulator)) as live,
        live.client() as client,
    ):
        publish(client, started("a-refused"))
        eventually_sync(
            lambda: client.get("/audits/a-refused", params={"probe": "false"}).status_code,
            until=lambda status: status == 200,
            timeout=30,
            message="the audit projected",
        )
        token = csrf_of(client.get("/ui/audits").text)
        # when the same refused actions are asked of both
        asked = {
            "wrong state": ("a-refused/restore", {"reason": "x"}),
            "unknown audit": ("nobody-here/restore", {"reason": "x"}),
            "bad input": ("a-refused/fail", {"code": "no-such-code", "reason": "x"}),
        }
        answers = {
            why: (
                client.post(f"/audits/{path}", json=body).status_code,
                client.post(f"/ui/audits/{path}", data={**body, "csrf": token}).status_code,
            )
            for why, (path, body) in asked.items()
        }

    # then the console answers each with the API's status
    assert answers == {
        "wrong state": (409, 409),
        "unknown audit": (404, 404),
        "bad input": (422, 422),
    }


def test_a_dead_letter_page_gives_every_consumers_reason(
    tmp_path: Path, simulator: SimulatorServer
) -> None:
    with (
        LiveServer(["api"], **server_settings(tmp_path, simulator)) as live,
        httpx.Client(base_url=live.url) as client,
    ):
        assert live.backends is not None
        log = live.backends.log
        source = Record(log.topics.lifecycle, 0, 5, "a-twice", b"\xffnot json")
        first = dead_letter(log.topics, source, "audit-projector", "not valid JSON")
        second = dead_letter(log.topics, source, "audit-telemetry", "cannot be handled: boom")
        live.call(lambda: log.append([first, second, first]))
        listing = client.get("/ui/dead-letters")
        assert listing.text.count("data-position=") == 1  # kept once
        (position,) = re.findall(r'data-position="([^"]+)"', listing.text)
        page = client.get(f"/ui/dead-letters/{position}").text
        assert '<td id="reason">not valid JSON</td>' in page
        assert "audit-telemetry: cannot be handled: boom" in page
