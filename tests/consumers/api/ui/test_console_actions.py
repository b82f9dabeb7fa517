"""The console's actions over plain HTTP against a live API and projector: forms only for a
session that may use them, a confirmation step before one audit is failed or restored, bulk
previews naming what they record, a dead letter's replay (as it is, or corrected) offered only
when it can work, and refusals as pages of their own kind (404, 409, 403, 422)."""

from __future__ import annotations

import base64
import html
import json
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from consumers.eventlog.codec import dead_letter, encode
from consumers.eventlog.port import Record
from consumers.runtime.endpoints import parse_webhook_urls
from consumers.workflows.simulator.server import SimulatorServer
from projections.values import ParkedEntry
from tests.consumers.api.conftest import LiveServer, server_settings
from tests.consumers.api.ui.test_console_http import csrf_of
from tests.contracts.projection_store import failed, started
from tests.eventually import eventually_sync

ADMIN, VIEWER = "admin-secret-0001", "viewer-secret-0002"
TOKENS = f"admin:{ADMIN}:operate,viewer:{VIEWER}:read"
SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()
HOOK_URL = "https://hooks.example/in"
(HOOK,) = (e.name for e in parse_webhook_urls(HOOK_URL))
NOW = datetime.now(UTC)
RUNNING, OPERATOR_FAILED = "a-run", "a-op"
START_ID = uuid.uuid4()  # the event id of RUNNING's start


def poison_body() -> dict[str, Any]:
    """An envelope with a field no event has: set aside, it does not decode today."""
    return {
        "event_id": str(uuid.uuid4()),
        "type": "AuditStarted",
        "schema_version": 1,
        "audit_id": "a-poison",
        "occurred_at": NOW.isoformat(),
        "producer": "crawler",
        "data": {"project_id": "p1", "colour": "blue"},
    }


@dataclass
class Console:
    live: LiveServer
    decodable: str  # a dead letter whose record decodes today
    poison: str  # one whose record does not
    clash: str  # one that decodes, but its event id names another event of its audit

    @contextmanager
    def sign_in(self, token: str) -> Iterator[httpx.Client]:
        with httpx.Client(base_url=self.live.url, timeout=60) as client:
            login = client.get("/ui/login")
            signed = client.post("/ui/login", data={"token": token, "csrf": csrf_of(login.text)})
            assert signed.status_code == 303, signed.text
            yield client

    def api(self) -> httpx.Client:
        return self.live.client(ADMIN)

    def history(self, audit_id: str) -> list[dict[str, Any]]:
        with self.api() as api:
            answer = api.get(f"/audits/{audit_id}/events")
        assert answer.status_code == 200, answer.text
        events: list[dict[str, Any]] = answer.json()["events"]
        return events

    def status(self, audit_id: str) -> int | str:
        with self.api() as api:
            answer = api.get(f"/audits/{audit_id}", params={"probe": "false"})
        return answer.json()["status"] if answer.status_code == 200 else answer.status_code


@pytest.fixture
def console(tmp_path: Path, simulator: SimulatorServer) -> Iterator[Console]:
    settings = server_settings(
        tmp_path, simulator, api_tokens=TOKENS, webhook_urls=HOOK_URL, webhook_secret=SECRET
    )
    with LiveServer(["api", "projector"], **settings) as live:
        backends = live.backends
        assert backends is not None
        log, topics = backends.log, backends.log.topics
        events = [
            started(RUNNING, NOW).model_copy(update={"event_id": START_ID}),
            started(OPERATOR_FAILED, NOW),
            failed(OPERATOR_FAILED, NOW, by="operator"),
        ]
        valid = encode(topics.lifecycle, started("a-set-aside", NOW)).value
        poison = json.dumps(poison_body()).encode()
        other = started(RUNNING, NOW, project_id="p-other").model_copy(
            update={"event_id": START_ID}
        )
        clash = encode(topics.lifecycle, other).value
        letters = [
            dead_letter(
                topics,
                Record(topics.lifecycle, 0, 900, "a-set-aside", valid),
                "audit-projector",
                "cannot be handled: the store was away",
            ),
            dead_letter(
                topics,
                Record(topics.lifecycle, 0, 901, "a-poison", poison),
                "audit-projector",
                "does not decode: data.colour: extra inputs are not permitted",
            ),
            dead_letter(
                topics,
                Record(topics.lifecycle, 0, 902, RUNNING, clash),
                "audit-projector",
                "event_id_conflict: another event of the audit has this id",
            ),
        ]

        async def seed() -> None:
            await log.append([encode(topics.lifecycle, e) for e in events])
            await log.append(letters)
            await backends.store.brake.engage_brake("sweep-1", 5, 6, NOW)
            await backends.store.deliveries.register(HOOK, HOOK_URL, NOW)
            await backends.store.deliveries.park(
                [
                    ParkedEntry(
                        endpoint=HOOK,
                        outcome_id=f"out_{1:032x}",
                        audit_id=OPERATOR_FAILED,
                        partition=0,
                        body="{}",
                        attempts=9,
                        error="HTTP 503",
                        parked_at=NOW,
                    )
                ]
            )

        live.call(seed)
        with live.client(ADMIN) as api:
            positions = eventually_sync(
                lambda: [d["position"] for d in api.get("/dead-letters").json()["dead_letters"]],
                until=lambda found: len(found) == 3,
                timeout=30,
                message="the three dead letters listed",
            )
        clash_at, poison_at, decodable_at = positions  # newest first
        console = Console(live, decodable_at, poison_at, clash_at)
        eventually_sync(
            lambda: console.status(OPERATOR_FAILED),
            until=lambda status: status == "failed",
            timeout=30,
            message="the audits projected",
        )
        yield console


def post_forms(page: str) -> list[str]:
    """Where the page's POST forms go (the sign-out form and the incident banner's aside)."""
    actions = re.findall(
        r'<form(?![^>]*incident-form)[^>]*method="post"[^>]*action="([^"]+)"', page
    )
    return [html.unescape(a) for a in actions if a != "/ui/logout"]


def form_of(page: str, button: str) -> tuple[str, dict[str, str]]:
    """The POST form holding the button ``button``: where it goes, and its fields."""
    for action, body in re.findall(
        r'<form[^>]*method="post"[^>]*action="([^"]+)"[^>]*>(.*?)</form>', page, re.S
    ):
        if f'id="{button}"' in body:
            fields = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', body)
            areas = re.findall(r'<textarea name="([^"]+)"[^>]*>(.*?)</textarea>', body, re.S)
            return html.unescape(action), {k: html.unescape(v) for k, v in fields + areas}
    raise AssertionError(f"no form with a button {button!r}")


def pages(console: Console) -> list[str]:
    return [
        "/ui",
        "/ui/audits",
        f"/ui/audits/{RUNNING}",
        f"/ui/audits/{OPERATOR_FAILED}",
        "/ui/dead-letters",
        f"/ui/dead-letters/{console.decodable}",
        f"/ui/dead-letters/{console.poison}",
        f"/ui/dead-letters/{console.clash}",
        "/ui/deliveries",
        "/ui/backtest",
    ]


def test_a_read_only_session_sees_no_action_form_on_any_page(console: Console) -> None:
    with console.sign_in(VIEWER) as viewer:
        seen = {path: viewer.get(path) for path in pages(console)}
    with console.sign_in(ADMIN) as admin:
        offered = {path: post_forms(admin.get(path).text) for path in pages(console)}

    assert {path: answer.status_code for path, answer in seen.items()} == dict.fromkeys(
        pages(console), 200
    )
    assert {
        path: post_forms(answer.text) for path, answer in seen.items() if post_forms(answer.text)
    } == {}
    # the same pages offer an operator each form (the brake, bulk, one audit, dead letters,
    # deliveries)
    replay = f"/ui/dead-letters/{console.decodable}/replay"
    assert offered == {
        "/ui": ["/ui/brake/release", "/ui/brake/discard"],
        "/ui/audits": ["/ui/bulk/fail", "/ui/bulk/restore"],
        f"/ui/audits/{RUNNING}": [f"/ui/audits/{RUNNING}/fail", f"/ui/audits/{RUNNING}/probe"],
        f"/ui/audits/{OPERATOR_FAILED}": [f"/ui/audits/{OPERATOR_FAILED}/restore"],
        "/ui/dead-letters": [],
        f"/ui/dead-letters/{console.decodable}": [replay, replay],
        f"/ui/dead-letters/{console.poison}": [f"/ui/dead-letters/{console.poison}/replay"],
        f"/ui/dead-letters/{console.clash}": [f"/ui/dead-letters/{console.clash}/replay"],
        "/ui/deliveries": ["/ui/deliveries/retry", "/ui/deliveries/retry"],
        "/ui/backtest": [],
    }


def test_failing_one_audit_is_confirmed_first_and_records_what_the_confirmation_showed(
    console: Console,
) -> None:
    before = console.history(RUNNING)
    with console.sign_in(ADMIN) as admin:
        audit_page = admin.get(f"/ui/audits/{RUNNING}").text
        action, fields = form_of(audit_page, "fail")
        asked = {**fields, "code": "workflow_internal", "reason": "stuck for 3 h"}
        preview = admin.post(action, data={**asked, "on_behalf_of": "alice"})
        after_preview = console.history(RUNNING), console.status(RUNNING)
        action, confirm = form_of(preview.text, "confirm")
        confirmed = admin.post(action, data=confirm)
        shown = admin.get(confirmed.headers["location"])

    # no code is chosen for the operator: the list starts with an empty choice, selected
    select = re.search(r'<select name="code"[^>]*>(.*?)</select>', audit_page, re.S)
    assert select is not None
    assert re.findall(r'<option value="([^"]*)" selected', select.group(1)) == [""]
    # the confirmation shows what will be recorded, and records nothing
    assert preview.status_code == 200
    recorded = dict(re.findall(r'<td id="record-([a-z-]+)">([^<]*)</td>', preview.text))
    assert recorded == {
        "change": "running → failed",
        "code": "workflow_internal",
        "reason": "stuck for 3 h",
        "actor": "token:admin",
        "on-behalf-of": "alice",
    }
    assert after_preview == (before, "running")
    # confirmed, the audit is failed with that code, reason and actor
    assert confirm == {
        "csrf": fields["csrf"],
        "code": "workflow_internal",
        "reason": "stuck for 3 h",
        "on_behalf_of": "alice",
        "confirm": "yes",
    }
    assert confirmed.status_code == 303 and shown.status_code == 200
    events = console.history(RUNNING)
    assert len(events) == len(before) + 1
    last = events[-1]
    assert last["type"] == "AuditFailed"
    assert last["data"]["error_code"] == "workflow_internal"
    assert last["data"]["actor"] == "token:admin" and last["data"]["on_behalf_of"] == "alice"
    assert "stuck for 3 h" in json.dumps(last["data"])
    assert console.status(RUNNING) == "failed"


def test_restoring_one_audit_is_confirmed_first(console: Console) -> None:
    before = console.history(OPERATOR_FAILED)
    with console.sign_in(ADMIN) as admin:
        action, fields = form_of(admin.get(f"/ui/audits/{OPERATOR_FAILED}").text, "restore")
        preview = admin.post(action, data={**fields, "reason": "it was alive"})
        unchanged = console.history(OPERATOR_FAILED)
        action, confirm = form_of(preview.text, "confirm")
        confirmed = admin.post(action, data=confirm)

    recorded = dict(re.findall(r'<td id="record-([a-z-]+)">([^<]*)</td>', preview.text))
    assert recorded == {
        "change": "failed → running",
        "reason": "it was alive",
        "actor": "token:admin",
        "on-behalf-of": "-",
    }
    assert unchanged == before
    assert confirmed.status_code == 303
    last = console.history(OPERATOR_FAILED)[-1]
    assert last["type"] == "AuditRestored" and last["data"]["actor"] == "token:admin"
    assert console.status(OPERATOR_FAILED) == "running"


def test_the_bulk_preview_shows_the_code_and_reason_it_will_record(console: Console) -> None:
    with console.sign_in(ADMIN) as admin:
        action, fields = form_of(admin.get("/ui/audits?status=running").text, "bulk-fail")
        preview = admin.post(
            action, data={**fields, "fail_code": "deploy_reset", "reason": "region down"}
        )
        restore_action, restore = form_of(
            admin.get("/ui/audits?status=failed").text, "bulk-restore"
        )
        restore_preview = admin.post(restore_action, data={**restore, "reason": "false alarm"})

    assert preview.status_code == 200 and 'id="preview-count">1<' in preview.text
    recorded = dict(re.findall(r'<td id="record-([a-z-]+)">([^<]*)</td>', preview.text))
    assert recorded == {"code": "deploy_reset", "reason": "region down", "actor": "token:admin"}
    recorded = dict(re.findall(r'<td id="record-([a-z-]+)">([^<]*)</td>', restore_preview.text))
    assert recorded == {"reason": "false alarm", "actor": "token:admin"}
    assert console.status(RUNNING) == "running"  # previews change nothing


def test_replay_is_offered_only_for_a_record_that_decodes_and_either_can_be_corrected(
    console: Console,
) -> None:
    with console.sign_in(ADMIN) as admin:
        decodable = admin.get(f"/ui/dead-letters/{console.decodable}").text
        poison = admin.get(f"/ui/dead-letters/{console.poison}").text
        clash = admin.get(f"/ui/dead-letters/{console.clash}").text
        _, corrected = form_of(poison, "replay-corrected")
        preview = admin.post(
            f"/ui/dead-letters/{console.decodable}/replay", data={"csrf": csrf_of(decodable)}
        )
        action, confirm = form_of(preview.text, "confirm-replay")
        replayed = admin.post(action, data=confirm)

    assert 'id="replay"' in decodable and '<td id="decodes">yes</td>' in decodable
    assert 'id="replay"' not in poison and '<td id="decodes">no: ' in poison
    assert 'id="no-replay"' in poison
    # it decodes, but a dry run says its replay would be refused: not offered, and why
    assert '<td id="decodes">yes</td>' in clash and 'id="replay"' not in clash
    no_replay = re.search(r'<p class="hint" id="no-replay">(.*?)</p>', clash, re.S)
    assert no_replay is not None and str(START_ID) in no_replay.group(1), no_replay
    assert 'id="replay-corrected"' in clash
    # the corrected body starts as the original's text
    assert json.loads(corrected["body"]) == json.loads(
        html.unescape(re.search(r'<pre id="original">(.*?)</pre>', poison, re.S).group(1))  # type: ignore[union-attr]
    )
    assert preview.status_code == 200 and 'id="replay-preview"' in preview.text
    assert replayed.status_code == 200 and 'id="replayed"' in replayed.text
    assert "by token:admin" in replayed.text
    assert 'id="replay"' not in replayed.text and 'id="replay-corrected"' not in replayed.text
    eventually_sync(
        lambda: console.status("a-set-aside"),
        until=lambda status: status == "running",
        timeout=30,
        message="the replayed start projected",
    )


def test_a_corrected_body_is_dry_run_then_replayed_and_a_bad_one_refused_naming_why(
    console: Console,
) -> None:
    body = poison_body()
    fixed = {**body, "data": {"project_id": "p1"}}
    clash = {**fixed, "audit_id": RUNNING, "event_id": str(START_ID)}  # another event's id
    with console.sign_in(ADMIN) as admin:
        page = admin.get(f"/ui/dead-letters/{console.poison}").text
        action, fields = form_of(page, "replay-corrected")
        not_json = admin.post(action, data={**fields, "body": "{not json"})
        still_bad = admin.post(action, data={**fields, "body": json.dumps(body)})
        conflict = admin.post(action, data={**fields, "body": json.dumps(clash)})
        empty = admin.post(action, data={**fields, "body": "  "})
        preview = admin.post(action, data={**fields, "body": json.dumps(fixed, indent=2)})
        unpublished = console.status("a-poison")
        action, confirm = form_of(preview.text, "confirm-replay")
        replayed = admin.post(action, data=confirm)

    assert not_json.status_code == 422 and "is not valid JSON" in not_json.text
    assert still_bad.status_code == 422 and "the corrected body still does not decode" in (
        still_bad.text
    )
    assert "colour" in still_bad.text
    # the operator's text comes back to be corrected again
    assert form_of(still_bad.text, "replay-corrected")[1]["body"] == json.dumps(body)
    assert conflict.status_code == 409
    assert empty.status_code == 422 and "body: paste the envelope" in empty.text
    assert preview.status_code == 200 and "the corrected body decodes" in preview.text
    assert json.loads(confirm["body"]) == fixed and confirm["confirm"] == "yes"
    assert unpublished == 404
    assert replayed.status_code == 200 and "Replayed with a corrected body" in replayed.text
    assert "a corrected body" in re.search(r'<td id="replayed-by">(.*?)</td>', replayed.text).group(
        1
    )  # type: ignore[union-attr]
    eventually_sync(
        lambda: console.status("a-poison"),
        until=lambda status: status == "running",
        timeout=30,
        message="the corrected start projected",
    )


def test_refusals_are_pages_of_their_kind(console: Console) -> None:
    with console.sign_in(VIEWER) as viewer:
        token = csrf_of(viewer.get("/ui").text)
        forbidden = viewer.post(
            f"/ui/audits/{RUNNING}/fail",
            data={"csrf": token, "code": "oom", "reason": "r", "confirm": "yes"},
        )
    with console.sign_in(ADMIN) as admin:
        csrf = csrf_of(admin.get("/ui").text)
        unknown_audit = admin.post(
            "/ui/audits/a-nobody/fail", data={"csrf": csrf, "code": "oom", "reason": "r"}
        )
        unknown_letter = admin.get("/ui/dead-letters/0:999999")
        conflict = admin.post(f"/ui/audits/{RUNNING}/restore", data={"csrf": csrf, "reason": "r"})
        invalid = admin.post(f"/ui/audits/{RUNNING}/fail", data={"csrf": csrf, "code": ""})

    def kind(answer: httpx.Response) -> tuple[int, str, list[str]]:
        heading = re.search(r'<h1 id="refused"[^>]*>([^<]+)</h1>', answer.text)
        assert heading is not None, answer.text
        why = re.search(r'<ul class="problem" id="why">(.*?)</ul>', answer.text, re.S)
        assert why is not None
        items = [html.unescape(i) for i in re.findall(r"<li>(.*?)</li>", why.group(1))]
        return answer.status_code, heading.group(1), items

    status, heading, problems = kind(forbidden)
    assert (status, heading) == (403, "Not allowed")
    assert problems == ["the token 'viewer' has no operate scope (its scope is read)"]
    assert re.search(r'<p id="needed">This needs the <b>operate</b> scope', forbidden.text)
    assert kind(unknown_audit) == (404, "Not found", ["unknown audit 'a-nobody'"])
    status, heading, problems = kind(unknown_letter)
    assert (status, heading) == (404, "Not found") and "no dead letter at 0:999999" in problems[0]
    status, heading, problems = kind(conflict)
    assert (status, heading) == (409, "Conflict") and "running" in problems[0]
    status, heading, problems = kind(invalid)
    assert (status, heading) == (422, "Invalid input")
    assert problems == [
        "code: choose the error code to record (none is chosen for you)",
        "reason: required (say why; it is recorded with the action)",
    ]
    assert console.status(RUNNING) == "running"
