"""The console's view of the outcome feed, over plain HTTP against a live API on each backend
pair: the overview's "Outcome feed" section, the parked deliveries page (filter by endpoint,
keyset pages), and a retry previewed then confirmed, refused to a read-only token and for an id
not parked. Parked entries are seeded through the store's port, as the feed parks them."""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from consumers.api.ui.pages import DELIVERIES_PAGE
from consumers.runtime.endpoints import parse_webhook_urls, queue_endpoint
from consumers.workflows.simulator.server import SimulatorServer
from projections.values import ParkedEntry
from tests.conftest import Backend
from tests.consumers.api.conftest import LiveServer, server_settings
from tests.consumers.api.ui.test_console_http import csrf_of

TOKENS = "admin:admin-secret-0001:operate,viewer:viewer-secret-0002:read"
FILTERED = "https://hooks.example/audits/in?token=receiver-t0ken#audit.failed|audit.overturned"
PLAIN = "https://other.example/hook"
HOOK, OTHER = (e.name for e in parse_webhook_urls(f"{FILTERED} {PLAIN}"))
QUEUE = queue_endpoint("q-outcomes").name
SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
BULK = DELIVERIES_PAGE + 1  # audits with one entry each on HOOK: two pages with a-1's two


def oid(n: int) -> str:
    return f"out_{n:032x}"


def parked(endpoint: str, n: int, audit_id: str, kind: str = "audit.failed") -> ParkedEntry:
    body = {"id": oid(n), "type": kind, "audit_id": audit_id, "status": "failed"}
    return ParkedEntry(
        endpoint=endpoint,
        outcome_id=oid(n),
        audit_id=audit_id,
        partition=0,
        body=json.dumps(body),
        attempts=9,
        error="HTTP 503 from the endpoint",
        parked_at=T0 + timedelta(minutes=n),
    )


# HOOK: a-1's two entries (its failure, then its overturn), then one entry for each of BULK
# audits; QUEUE: a-1's failure (the same outcome, another endpoint) and a-9's. OTHER: none.
A1_FAILED, A1_OVERTURNED = oid(1), oid(2)
ON_HOOK = [parked(HOOK, 1, "a-1"), parked(HOOK, 2, "a-1", "audit.overturned")] + [
    parked(HOOK, 100 + i, f"a-bulk-{i:03d}") for i in range(BULK)
]
ON_QUEUE = [parked(QUEUE, 1, "a-1"), parked(QUEUE, 9, "a-9")]


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

    def parked(self, endpoint: str | None = None) -> list[ParkedEntry]:
        backends = self.live.backends
        assert backends is not None
        return self.live.call(lambda: backends.store.deliveries.parked(endpoint, limit=1000))


@pytest.fixture
def console(backend: Backend, tmp_path: Path, simulator: SimulatorServer) -> Iterator[Console]:
    settings = server_settings(
        tmp_path,
        simulator,
        event_log_url=backend.event_log_url,
        database_url=backend.database_url,
        topic_prefix=backend.topic_prefix,
        api_tokens=TOKENS,
        webhook_urls=f"{FILTERED}, {PLAIN}",
        webhook_secret=SECRET,
        outcome_queue_id="q-outcomes",
    )
    with LiveServer(["api"], **settings) as live:
        backends = live.backends
        assert backends is not None
        store = backends.store.deliveries

        async def seed() -> None:
            for name, target in ((HOOK, "https://hooks.example/audits/in"), (QUEUE, "queue")):
                await store.register(name, target, T0)
            await store.park(ON_HOOK)
            await store.park(ON_QUEUE)

        live.call(seed)
        yield Console(live)


def rows(page: str) -> list[tuple[str, str]]:
    """The parked entries a page lists: (endpoint, outcome id), in order."""
    return [
        (endpoint, outcome)
        for outcome, endpoint in re.findall(
            r'<tr data-outcome="([^"]+)" data-endpoint="([^"]+)"', page
        )
    ]


def next_page(page: str) -> str | None:
    found = re.search(r'id="next-page" href="([^"]+)"', page)
    return html.unescape(found.group(1)) if found else None


def form_of(page: str, button: str) -> tuple[str, dict[str, str]]:
    """The form whose button has id ``button``: where it posts, and its hidden fields."""
    for action, body in re.findall(
        r'<form method="post" action="([^"]+)">(.*?)</form>', page, re.S
    ):
        if f'id="{button}"' in body:
            hidden = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', body)
            return html.unescape(action), {k: html.unescape(v) for k, v in hidden}
    raise AssertionError(f"no form with a button {button!r}")


def test_the_overview_shows_each_endpoint_and_what_is_parked_on_it(console: Console) -> None:
    with console.sign_in("viewer-secret-0002") as client:
        overview = client.get("/ui")

    assert overview.status_code == 200
    section = overview.text.split('<section id="outcomes">', 1)[1].split("</section>", 1)[0]
    endpoints = dict(
        re.findall(r'<tr data-endpoint="([^"]+)">.*?<td class="n[^"]*">(\d+)</td>', section)
    )
    assert endpoints == {HOOK: str(len(ON_HOOK)), OTHER: "0", QUEUE: str(len(ON_QUEUE))}
    hook_row = re.search(rf'<tr data-endpoint="{HOOK}">(.*?)</tr>', section)
    assert hook_row is not None
    # the target without its query (a receiver's token), the filter, a count that stands out
    assert "<td>https://hooks.example/audits/in</td>" in hook_row.group(1)
    assert "<td>audit.failed, audit.overturned</td>" in hook_row.group(1)
    assert f'<td class="n problem">{len(ON_HOOK)}</td>' in hook_row.group(1)
    assert "receiver-t0ken" not in overview.text
    assert f'<tr data-endpoint="{OTHER}"><td><a href="/ui/deliveries?endpoint={OTHER}">' in section
    assert re.search(rf'<tr data-endpoint="{OTHER}">.*<td>all</td><td class="n">0</td>', section)
    total = len(ON_HOOK) + len(ON_QUEUE)
    assert f'<b id="parked-count" class="problem">{total}</b>' in section
    assert 'href="/ui/deliveries"' in section and 'id="outcomes-off"' not in section


def test_the_deliveries_page_filters_by_endpoint_and_pages_by_keyset(console: Console) -> None:
    with console.sign_in("viewer-secret-0002") as client:
        first = client.get("/ui/deliveries")
        link = next_page(first.text)
        assert link is not None and link.startswith("/ui/deliveries?after=")
        second = client.get(link)
        hook_first = client.get("/ui/deliveries", params={"endpoint": HOOK})
        hook_link = next_page(hook_first.text)
        assert hook_link is not None and f"endpoint={HOOK}" in hook_link
        hook_second = client.get(hook_link)
        queue = client.get("/ui/deliveries", params={"endpoint": QUEUE})

    everything = [(e.endpoint, e.outcome_id) for e in ON_HOOK + ON_QUEUE]  # in parking order
    assert rows(first.text) == everything[:DELIVERIES_PAGE]
    assert rows(second.text) == everything[DELIVERIES_PAGE:]
    assert next_page(second.text) is None
    assert '<span id="parked-total">55</span>' in first.text
    hook = [(HOOK, e.outcome_id) for e in ON_HOOK]
    assert rows(hook_first.text) + rows(hook_second.text) == hook
    assert len(rows(hook_first.text)) == DELIVERIES_PAGE
    assert f'<span id="parked-total">{len(ON_HOOK)}</span>' in hook_second.text
    assert rows(queue.text) == [(QUEUE, A1_FAILED), (QUEUE, oid(9))]
    assert next_page(queue.text) is None
    assert f'<option value="{QUEUE}" selected>' in queue.text
    # each entry: its type, its audit linked, its attempts and error (and no retry form for a
    # read-only token: an operator's page offers it)
    a1 = re.search(
        rf'<tr data-outcome="{A1_OVERTURNED}" data-endpoint="{HOOK}".*?</tr>', first.text, re.S
    )
    assert a1 is not None
    assert "<td>audit.overturned</td>" in a1.group(0)
    assert '<a href="/ui/audits/a-1">a-1</a>' in a1.group(0)
    assert '<td class="n">9</td>' in a1.group(0) and "HTTP 503 from the endpoint" in a1.group(0)
    assert "2026-12-01 09:02:00Z" in a1.group(0)
    assert f'id="retry-{HOOK}-{A1_OVERTURNED}"' not in a1.group(0)


def test_a_retry_is_previewed_with_its_audits_other_entries_then_confirmed(
    console: Console,
) -> None:
    with console.sign_in("admin-secret-0001") as client:
        # when an operator asks to retry a-1's second entry on HOOK, from its row's form
        action, asked = form_of(client.get("/ui/deliveries").text, f"retry-{HOOK}-{A1_OVERTURNED}")
        preview = client.post(action, data=asked)
        untouched = console.parked()
        action, confirm = form_of(preview.text, "confirm")
        confirmed = client.post(action, data=confirm)
        location = confirmed.headers.get("location", "")
        notice = client.get(location)
        # and then every entry parked on the queue, from the queue's page
        queue_page = client.get("/ui/deliveries", params={"endpoint": QUEUE}).text
        action, every = form_of(queue_page, "retry-all")
        queue_preview = client.post(action, data=every)
        action, confirm_all = form_of(queue_preview.text, "confirm")
        queue_done = client.post(action, data=confirm_all)

    # then the preview lists the audit's other entry too, on that endpoint only, and changes
    # nothing; the confirmation asks for both, as the session's token, and says so
    assert preview.status_code == 200
    assert rows(preview.text) == [(HOOK, A1_FAILED), (HOOK, A1_OVERTURNED)]
    assert '<b id="preview-count">2</b>' in preview.text
    assert asked == {"csrf": asked["csrf"], "ids": A1_OVERTURNED, "endpoint": HOOK}
    assert confirm == {**asked, "confirm": "yes"}
    assert every == {"csrf": asked["csrf"], "all": "yes", "endpoint": QUEUE}
    assert all(e.retry_requested_at is None for e in untouched)
    assert confirmed.status_code == 303
    assert location.startswith(f"/ui/deliveries?endpoint={HOOK}&done=retry")
    assert "2 parked entries to be delivered again" in notice.text
    assert "by token:admin at" in notice.text
    assert rows(queue_preview.text) == [(QUEUE, A1_FAILED), (QUEUE, oid(9))]
    assert queue_done.status_code == 303
    requested = {
        (e.endpoint, e.outcome_id): e.retry_requested_by
        for e in console.parked()
        if e.retry_requested_at is not None
    }
    assert requested == {
        (HOOK, A1_FAILED): "token:admin",
        (HOOK, A1_OVERTURNED): "token:admin",
        (QUEUE, A1_FAILED): "token:admin",
        (QUEUE, oid(9)): "token:admin",
    }


def test_a_retry_is_refused_to_a_read_only_token_and_for_what_is_not_parked(
    console: Console,
) -> None:
    with console.sign_in("viewer-secret-0002") as viewer:
        token = csrf_of(viewer.get("/ui/deliveries").text)
        read_only = viewer.post(
            "/ui/deliveries/retry",
            data={"csrf": token, "ids": A1_FAILED, "endpoint": HOOK, "confirm": "yes"},
        )
    with console.sign_in("admin-secret-0001") as admin:
        csrf = csrf_of(admin.get("/ui/deliveries").text)

        def retry(**fields: str) -> httpx.Response:
            return admin.post("/ui/deliveries/retry", data={"csrf": csrf, **fields})

        not_parked = retry(ids=f"{A1_FAILED} {oid(77)}", endpoint=HOOK, confirm="yes")
        elsewhere = retry(ids=oid(100), endpoint=QUEUE)  # parked on HOOK, not on the queue
        not_an_id = retry(ids="out_nope")
        no_ids = retry(ids="")
        unknown_endpoint = retry(all="yes", endpoint="webhook-00000000", confirm="yes")
        no_csrf = admin.post("/ui/deliveries/retry", data={"ids": A1_FAILED, "confirm": "yes"})
        bad_filter = admin.get("/ui/deliveries", params={"endpoint": "webhook-00000000"})
        bad_after = admin.get("/ui/deliveries", params={"after": "-3"})

    assert read_only.status_code == 403 and "has no operate scope" in read_only.text
    assert not_parked.status_code == 422
    assert f"ids: not parked on {HOOK}: {oid(77)}" in not_parked.text
    assert 'id="refused"' in not_parked.text
    assert elsewhere.status_code == 422 and f"not parked on {QUEUE}: {oid(100)}" in elsewhere.text
    assert not_an_id.status_code == 422 and "is not an outcome id" in not_an_id.text
    assert no_ids.status_code == 422 and "name at least one parked entry" in no_ids.text
    assert unknown_endpoint.status_code == 422
    assert "unknown endpoint &#39;webhook-00000000&#39;" in unknown_endpoint.text
    assert no_csrf.status_code == 403 and "CSRF" in no_csrf.text
    assert bad_filter.status_code == 422 and "unknown endpoint" in bad_filter.text
    assert f'<option value="{HOOK}">' in bad_filter.text  # the filter still offers the known
    assert bad_after.status_code == 422 and "after: a parked entry&#39;s number" in bad_after.text
    assert all(e.retry_requested_at is None for e in console.parked())


def test_without_endpoints_the_console_names_the_settings_that_configure_them(
    tmp_path: Path, simulator: SimulatorServer
) -> None:
    with (
        LiveServer(["api"], **server_settings(tmp_path, simulator)) as live,
        httpx.Client(base_url=live.url) as client,
    ):
        overview = client.get("/ui")
        page = client.get("/ui/deliveries")

    for answer in (overview, page):
        assert answer.status_code == 200
        off = re.search(r'<p class="none" id="outcomes-off">(.*?)</p>', answer.text)
        assert off is not None
        assert "AUDITREC_WEBHOOK_URLS" in off.group(1)
        assert "AUDITREC_OUTCOME_QUEUE_ID" in off.group(1)
    assert 'id="parked-count"' not in overview.text
    assert "nothing parked" in page.text and 'id="retry-all"' not in page.text
