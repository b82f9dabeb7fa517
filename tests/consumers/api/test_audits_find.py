"""Finding audits over HTTP and on the command line, against a live API and its pipeline: one
search (an audit id, an instance id, a project id, a start URL's beginning), each sort in both
orders paged forwards by ``next_cursor`` and back by ``prev_cursor`` with no row lost or
repeated, the total, and the one vocabulary of filters (``running_longer_than``; the older
``older_than`` kept as it was)."""

from __future__ import annotations

import html
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from consumers.api.ui.pages import PAGE_SIZE
from consumers.workflows.simulator.server import SimulatorServer
from projections.audits import SORTS
from tests import cli
from tests.consumers.api.conftest import API_AND_PIPELINE, LiveServer, envelope, server_settings
from tests.eventually import eventually_sync

N = PAGE_SIZE + 5  # audits: more than a page of the console
COMPLETED = [i for i in range(N) if i % 4 == 0]
FAILED = [i for i in range(N) if i % 4 == 1]


def known_audits(old: datetime) -> list[dict[str, Any]]:
    """``f-000``…: started a second apart, in five projects and seven sites; every fourth
    completed and every fourth (the next) failed, their ends minutes apart and shared."""
    events = [
        envelope(
            "AuditStarted",
            f"f-{i:03d}",
            {
                "project_id": f"p-{i % 5}",
                "workflow_instance_id": f"wf-f-{i:03d}",
                "start_url": f"https://site{i % 7}.example/page{i}",
            },
            at=old + timedelta(seconds=i),
        )
        for i in range(N)
    ]
    events += [
        envelope("AuditCompleted", f"f-{i:03d}", {}, at=old + timedelta(hours=1, minutes=i % 3))
        for i in COMPLETED
    ]
    events += [
        envelope(
            "AuditFailed",
            f"f-{i:03d}",
            {"error_code": "db_error", "error_detail": "D1_ERROR", "failed_by": "workflow"},
            at=old + timedelta(hours=1, minutes=i % 5),
        )
        for i in FAILED
    ]
    return events


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, _simulator_server: SimulatorServer) -> Any:
    tmp = tmp_path_factory.mktemp("find")
    # Nothing is stale for the watchdog: the figures stay the known ones.
    settings = server_settings(tmp, _simulator_server, stale_running_after="48h")
    with LiveServer(API_AND_PIPELINE, **settings) as server, server.client() as client:
        server.wait_pipeline_live()
        posted = client.post("/events", json=known_audits(datetime.now(UTC) - timedelta(hours=3)))
        assert posted.status_code == 202, posted.text
        eventually_sync(
            lambda: client.get("/audits", params={"status": "failed"}).json()["total"],
            until=lambda n: n == len(FAILED),
            timeout=30,
            message="the known audits to be projected",
        )
        server.env = {  # type: ignore[attr-defined]
            "AUDITREC_DATABASE_URL": settings["database_url"],
            "AUDITREC_EVENT_LOG_URL": settings["event_log_url"],
            "AUDITREC_TOPIC_PREFIX": settings["topic_prefix"],
        }
        yield server


@pytest.fixture
def client(live: LiveServer) -> Any:
    with live.client() as c:
        yield c


def ids(body: dict[str, Any]) -> list[str]:
    return [a["audit_id"] for a in body["audits"]]


def test_one_search_finds_an_audit_by_id_instance_project_or_url(client: httpx.Client) -> None:
    def found(q: str, **params: str) -> list[str]:
        response = client.get("/audits", params={"q": q, **params})
        assert response.status_code == 200, response.text
        assert response.json()["total"] == len(response.json()["audits"])
        return ids(response.json())

    assert found("f-007") == ["f-007"]  # the audit id
    assert found(" f-007 ") == ["f-007"]  # as pasted
    assert found("wf-f-012") == ["f-012"]  # the workflow instance id
    assert found("p-3") == [f"f-{i:03d}" for i in range(N - 1, -1, -1) if i % 5 == 3]
    site2 = [f"f-{i:03d}" for i in range(N - 1, -1, -1) if i % 7 == 2]
    assert found("https://site2.example/") == site2  # a URL's beginning
    assert found("site2.example") == site2  # without its scheme
    assert found("https://site2.example/page9") == ["f-009"]
    assert found("page9") == []  # the beginning, not any part
    assert found("f-00") == []  # ids exactly
    assert found("p-3", status="failed") == ["f-053", "f-033", "f-013"]
    too_long = client.get("/audits", params={"q": "x" * 3000})
    assert too_long.status_code == 422 and "q" in too_long.text


@pytest.mark.parametrize("sort", SORTS)
@pytest.mark.parametrize("order", ["desc", "asc"])
def test_each_sort_pages_forwards_and_back_losing_and_repeating_no_audit(
    client: httpx.Client, sort: str, order: str
) -> None:
    params = {"sort": sort, "order": order, "limit": 7}
    pages: list[list[str]] = []
    cursor: str | None = None
    while True:
        body = client.get("/audits", params={**params, **({"cursor": cursor} if cursor else {})})
        assert body.status_code == 200, body.text
        page = body.json()
        assert page["total"] == N
        assert (page["prev_cursor"] is None) == (not pages)  # only the first page has none
        pages.append(ids(page))
        cursor = page["next_cursor"]
        if cursor is None:
            break
    walked = [a for p in pages for a in p]
    assert len(walked) == N and len(set(walked)) == N
    assert [len(p) for p in pages] == [7] * (N // 7) + ([N % 7] if N % 7 else [])
    back = [pages[-1]]
    cursor = page["prev_cursor"]
    while cursor is not None:
        page = client.get("/audits", params={**params, "cursor": cursor}).json()
        back.append(ids(page))
        assert page["next_cursor"] is not None
        cursor = page["prev_cursor"]
    assert back == pages[::-1]
    everything = client.get("/audits", params={**params, "limit": 1000}).json()["audits"]
    assert [a["audit_id"] for a in everything] == walked
    ends = [a["completed_at"] or a.get("failed_at") for a in everything]
    finished = [e for e in ends if e is not None]
    if sort == "ended":  # a finished audit's end is its completion or its failure
        assert ends[: len(finished)] == finished  # the unfinished last either way
        assert finished == sorted(finished, reverse=order == "desc")
    if sort == "age":  # start to end (an hour or so) for the finished, to now (3 h) for others
        shortest = ends[: len(finished)] if order == "asc" else ends[::-1][: len(finished)]
        assert None not in shortest
    if sort == "status":
        statuses = [a["status"] for a in everything]
        assert statuses == sorted(statuses, reverse=order == "desc")


def test_a_cursor_belongs_to_its_sort(client: httpx.Client) -> None:
    cursor = client.get("/audits", params={"sort": "age", "limit": 2}).json()["next_cursor"]
    refused = client.get("/audits", params={"sort": "started", "cursor": cursor})
    assert refused.status_code == 422
    assert "query.cursor: from a list sorted by age desc" in refused.text
    assert client.get("/audits", params={"sort": "name"}).status_code == 422
    assert client.get("/audits", params={"order": "up"}).status_code == 422


def test_running_longer_than_is_the_filter_and_older_than_its_older_name(
    client: httpx.Client,
) -> None:
    running = N - len(COMPLETED) - len(FAILED)
    longer = client.get("/audits", params={"running_longer_than": "1h", "limit": 1})
    assert longer.json()["total"] == running
    assert longer.json()["audits"][0]["status"] == "running"
    assert client.get("/audits", params={"running_longer_than": "4h"}).json()["total"] == 0
    both = client.get("/audits", params={"running_longer_than": "1h", "status": "failed"})
    assert both.status_code == 422
    assert "query.running_longer_than: only for running audits" in both.text
    older = client.get("/audits", params={"older_than": "1h", "limit": 1}).json()
    assert older["total"] == N  # as it always was: any status
    bad = client.get("/audits", params={"running_longer_than": "soon"})
    assert bad.status_code == 422 and "query.running_longer_than" in bad.text


def test_the_console_searches_sorts_counts_and_pages_both_ways(client: httpx.Client) -> None:
    def rows(text: str) -> list[str]:
        return re.findall(r'<tr data-audit="([^"]+)"', text)

    def link(text: str, name: str) -> str | None:
        found = re.search(rf'id="{name}" href="([^"]+)"', text)
        return html.unescape(found.group(1)) if found else None

    by_id = client.get("/ui/audits", params={"q": "f-007"})
    assert rows(by_id.text) == ["f-007"] and 'id="total">1 audit<' in by_id.text
    assert 'name="q" id="search" value="f-007"' in by_id.text
    assert rows(client.get("/ui/audits", params={"q": "wf-f-012"}).text) == ["f-012"]

    first = client.get("/ui/audits", params={"sort": "ended", "order": "asc"})
    assert f'id="total">{N} audits<' in first.text
    assert link(first.text, "prev-page") is None
    assert 'aria-sort="ascending"' in first.text
    toggle = link(first.text, "sort-ended")
    assert toggle is not None and "sort=ended" in toggle and "order=desc" in toggle
    following = link(first.text, "next-page")
    assert following is not None and "sort=ended" in following and "order=asc" in following
    second = client.get(following)
    assert len(rows(first.text)) == PAGE_SIZE and len(rows(second.text)) == N - PAGE_SIZE
    assert not set(rows(first.text)) & set(rows(second.text))
    assert link(second.text, "next-page") is None
    back = link(second.text, "prev-page")
    assert back is not None
    assert rows(client.get(back).text) == rows(first.text)
    # a finished audit's "ended" cell and its age, start to end: an hour and a few minutes
    done = client.get("/ui/audits", params={"q": "f-004"}).text
    cells = re.findall(r"<td>([^<]*)</td>", done.split('data-audit="f-004"')[1])
    assert re.fullmatch(r"1h( [0-9]+m)?", cells[5]), cells  # not 3 h: until now
    assert cells[4].endswith("Z"), cells

    bad = client.get("/ui/audits", params={"sort": "nope", "held": "maybe"})
    assert (
        bad.status_code == 422 and "sort: one of" in bad.text and "held: true or false" in bad.text
    )
    # with a search, the bulk forms are not offered: they would act on the filters alone
    assert 'id="bulk"' not in by_id.text and 'id="bulk-off"' in by_id.text


def test_the_cli_searches_sorts_counts_and_pages_with_the_same_names(live: LiveServer) -> None:
    env = live.env  # type: ignore[attr-defined]

    def audits(*args: str) -> tuple[list[str], str]:
        result = cli.run("audits", "--json", *args, env=env)
        assert result.returncode == 0, result.stderr
        return [r["audit_id"] for r in json.loads(result.stdout)], result.stderr

    assert audits("--q", "f-007") == (["f-007"], "1 audit\n")
    assert audits("-q", "wf-f-012")[0] == ["f-012"]
    assert audits("--q", "site2.example", "--status", "failed")[0] == ["f-037", "f-009"]
    first, said = audits("--sort", "age", "--order", "asc", "--limit", "30")
    assert said.startswith(f"{N} audits\n") and "previous:" not in said
    cursor = said.split("more: --cursor ")[1].split()[0]
    rest, said = audits("--sort", "age", "--order", "asc", "--cursor", cursor)
    assert len(first) + len(rest) == N and not set(first) & set(rest)
    before = said.split("previous: --cursor ")[1].split()[0]
    assert (
        audits("--sort", "age", "--order", "asc", "--cursor", before, "--limit", "30")[0] == first
    )
    running = N - len(COMPLETED) - len(FAILED)
    assert audits("--running-longer-than", "1h")[1].startswith(f"{running} audits")
    assert audits("--older-than", "1h")[1].startswith(f"{N} audits")  # as it was
    assert audits("--not-held")[1].startswith(f"{N} audits")
    assert audits("--held")[0] == []
    refused = cli.run("audits", "--running-longer-than", "1h", "--status", "failed", env=env)
    assert refused.returncode == 2 and "--running-longer-than" in refused.stderr
    helped = cli.run("audits", "--help", env=env).stdout
    assert "--running-longer-than" in helped and "--older-than" not in helped
    assert "--held / --not-held" in helped and "--sort" in helped


def test_the_python_client_searches_sorts_and_counts(live: LiveServer) -> None:
    from auditrec_client import AuditrecClient

    with AuditrecClient(live.url) as client:
        assert [a["audit_id"] for a in client.audits(q="wf-f-012").audits] == ["f-012"]
        page = client.audits(sort="age", order="asc", limit=10)
        assert page.total == N and page.prev_cursor is None and page.next_cursor is not None
        following = client.audits(sort="age", order="asc", limit=10, cursor=page.next_cursor)
        assert following.prev_cursor is not None
        back = client.audits(sort="age", order="asc", limit=10, cursor=following.prev_cursor)
        assert back.audits == page.audits
        running = client.audits(running_longer_than="1h", limit=1)
        assert running.total == N - len(COMPLETED) - len(FAILED)
        assert client.audits(held=True).total == 0
        with pytest.raises(ValueError, match="running_longer_than"):
            client.audits(running_longer_than="soon")


def test_the_api_filters_by_project_and_code_as_the_console_and_the_cli_name_them(
    client: httpx.Client,
) -> None:
    by_new = client.get("/audits", params={"project": "p-1", "code": "db_error"}).json()
    by_old = client.get("/audits", params={"project_id": "p-1", "error_code": "db_error"}).json()
    assert by_new["total"] == by_old["total"] > 0
    assert ids(by_new) == ids(by_old)
    assert all(a["project_id"] == "p-1" and a["error_code"] == "db_error" for a in by_new["audits"])
    both = client.get("/audits", params={"project": "p-1", "project_id": "p-2"})
    assert both.status_code == 422 and "query.project_id: the older name of project" in both.text
