"""The console's orphans page, over plain HTTP against a live API on each backend pair and the
Workflows simulator: the watched workflows and the open orphans (an id with a slash and a
space among them), linked from the navigation; a termination previewed (nothing sent), then
confirmed (sent once, recorded with the session's token and the person acted for); the forms
shown only to a session with operate, and refused without it or without the CSRF token."""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from consumers.workflows.simulator.server import SimulatorServer
from projections.values import OrphanEvent, OrphanSighting
from tests.conftest import Backend
from tests.consumers.api.conftest import LiveServer, server_settings
from tests.consumers.api.ui.test_console_deliveries import form_of
from tests.consumers.api.ui.test_console_http import csrf_of
from tests.orphaned import instance, patches

TOKENS = "admin:admin-secret-0001:operate,viewer:viewer-secret-0002:read"
WF, EXPORT = "site-audit", "site-export"
SLASHED = "orphan 2/x"
NOW = datetime.now(UTC).replace(microsecond=0)
CREATED = NOW - timedelta(hours=1)


@dataclass
class Console:
    live: LiveServer

    @contextmanager
    def sign_in(self, token: str) -> Iterator[httpx.Client]:
        with httpx.Client(base_url=self.live.url, timeout=30) as client:
            login = client.get("/ui/login")
            signed = client.post("/ui/login", data={"token": token, "csrf": csrf_of(login.text)})
            assert signed.status_code == 303, signed.text
            yield client

    def history(self, workflow: str, instance_id: str) -> list[OrphanEvent]:
        backends = self.live.backends
        assert backends is not None
        return self.live.call(lambda: backends.store.orphans.history(workflow, instance_id))


@pytest.fixture
def console(backend: Backend, tmp_path: Path, simulator: SimulatorServer) -> Iterator[Console]:
    settings = server_settings(
        tmp_path,
        simulator,
        event_log_url=backend.event_log_url,
        database_url=backend.database_url,
        topic_prefix=backend.topic_prefix,
        api_tokens=TOKENS,
        cloudflare_workflows=EXPORT,
        terminate_workflows=WF,
    )
    for workflow, iid in ((WF, "orphan-1"), (WF, SLASHED), (EXPORT, "exp-1")):
        asyncio.run(instance(simulator, workflow, iid, "running", CREATED))
    with LiveServer(["api"], **settings) as live:
        backends = live.backends
        assert backends is not None
        store = backends.store.orphans

        async def seed() -> None:
            found = [OrphanSighting(i, "running", CREATED) for i in ("orphan-1", SLASHED)]
            await store.record_scan(WF, found, NOW)
            await store.record_scan(EXPORT, [OrphanSighting("exp-1", "running", CREATED)], NOW)

        live.call(seed)
        yield Console(live)


def rows(page: str) -> list[tuple[str, str]]:
    """The orphans a page lists: (workflow, instance id), in order."""
    return [
        (html.unescape(wf), html.unescape(iid))
        for wf, iid in re.findall(r'<tr data-workflow="([^"]+)" data-instance="([^"]+)"', page)
    ]


def test_the_orphans_page_lists_them_and_a_termination_is_previewed_then_confirmed(
    console: Console, simulator: SimulatorServer
) -> None:
    with console.sign_in("admin-secret-0001") as client:
        overview = client.get("/ui").text
        listing = client.get("/ui/orphans")
        # when an operator asks to terminate the slashed orphan from its row's form
        seq = re.search(
            rf'data-instance="{re.escape(html.escape(SLASHED))}" data-seq="(\d+)"', listing.text
        )
        assert seq is not None
        action, asked = form_of(listing.text, f"terminate-{seq.group(1)}")
        preview = client.post(action, data=asked)
        sent_before = asyncio.run(patches(simulator, WF, SLASHED))
        action, confirm = form_of(preview.text, "confirm")
        confirmed = client.post(action, data={**confirm, "on_behalf_of": "carol"})
        notice = client.get(confirmed.headers.get("location", ""))

    # then the page is in the navigation and lists the workflows and the open orphans
    assert '<a href="/ui/orphans">Orphans</a>' in overview
    assert listing.status_code == 200
    assert rows(listing.text)[-3:] == [(WF, "orphan-1"), (WF, SLASHED), (EXPORT, "exp-1")]
    assert '<span id="orphans-total">3</span>' in listing.text
    assert 'id="terminate-all"' in listing.text
    # only the terminable workflow's orphans have a form
    assert listing.text.count('action="/ui/orphans/terminate"') == 3  # two rows and "all"
    # and the preview sent nothing; the confirmation sent one PATCH, recorded with the token
    assert asked == {"csrf": asked["csrf"], "workflow": WF, "instance_id": SLASHED}
    assert preview.status_code == 200 and '<b id="preview-count">1</b>' in preview.text
    assert sent_before == (0, "running")
    assert confirm == {**asked, "confirm": "yes"}
    assert confirmed.status_code == 303
    assert "1 terminated (site-audit/orphan 2/x: terminated)" in html.unescape(notice.text)
    assert asyncio.run(patches(simulator, WF, SLASHED)) == (1, "terminated")
    assert [(e.kind, e.actor, e.on_behalf_of) for e in console.history(WF, SLASHED)] == [
        ("found", None, None),
        ("terminate_asked", "token:admin", "carol"),
        ("terminated", "token:admin", "carol"),
    ]
    assert (WF, SLASHED) not in rows(notice.text)


def test_terminations_are_refused_without_operate_csrf_or_a_terminable_workflow(
    console: Console, simulator: SimulatorServer
) -> None:
    target = {"workflow": WF, "instance_id": "orphan-1", "confirm": "yes"}
    with console.sign_in("viewer-secret-0002") as viewer:
        page = viewer.get("/ui/orphans").text
        read_only = viewer.post("/ui/orphans/terminate", data={"csrf": csrf_of(page), **target})
    with console.sign_in("admin-secret-0001") as admin:
        csrf = csrf_of(admin.get("/ui/orphans").text)
        no_csrf = admin.post("/ui/orphans/terminate", data=target)
        barred = admin.post(
            "/ui/orphans/terminate",
            data={"csrf": csrf, "workflow": EXPORT, "instance_id": "exp-1", "confirm": "yes"},
        )
        unknown = admin.post(
            "/ui/orphans/terminate",
            data={"csrf": csrf, "workflow": WF, "instance_id": "nope", "confirm": "yes"},
        )
        bad_filter = admin.get("/ui/orphans", params={"workflow": "nope"})

    assert rows(page)[-3:] == [(WF, "orphan-1"), (WF, SLASHED), (EXPORT, "exp-1")]
    assert 'action="/ui/orphans/terminate"' not in page  # no form without operate
    assert read_only.status_code == 403 and "has no operate scope" in read_only.text
    assert no_csrf.status_code == 403 and "CSRF" in no_csrf.text
    assert barred.status_code == 403 and "AUDITREC_TERMINATE_WORKFLOWS" in barred.text
    assert unknown.status_code == 404 and "not an orphan" in unknown.text
    assert bad_filter.status_code == 422 and "is not watched" in html.unescape(bad_filter.text)
    for workflow, iid in ((WF, "orphan-1"), (EXPORT, "exp-1")):
        assert asyncio.run(patches(simulator, workflow, iid)) == (0, "running")
