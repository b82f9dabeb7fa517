"""``GET /orphans``, ``GET /orphans/{workflow}/{id}`` and ``POST /orphans/{workflow}/{id}/terminate``
over HTTP against a live API and the Workflows simulator (SQLite; the store's both adapters are
held to one contract in tests/contracts): the list and an orphan's history with scope read,
terminations with scope operate and a JSON content type, recorded with the token's actor; ids
with a slash and a space percent-encoded; refusals that name the problem."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import pytest

from consumers.workflows.simulator.server import SimulatorServer
from projections.values import OrphanSighting
from tests.consumers.api.conftest import JSON, LiveServer, server_settings
from tests.orphaned import instance, patches

TOKENS = "admin:admin-secret-0001:operate,viewer:viewer-secret-0002:read"
WF, EXPORT = "site-audit", "site-export"
SLASHED = "orphan 2/x"
NOW = datetime.now(UTC).replace(microsecond=0)
CREATED = NOW - timedelta(hours=1)


def path(workflow: str, instance_id: str, *rest: str) -> str:
    return "/".join(["/orphans", quote(workflow, safe=""), quote(instance_id, safe=""), *rest])


@pytest.fixture
def live(tmp_path: Path, simulator: SimulatorServer) -> Iterator[LiveServer]:
    settings = server_settings(
        tmp_path,
        simulator,
        api_tokens=TOKENS,
        cloudflare_workflows=EXPORT,
        terminate_workflows=WF,
    )
    for workflow, iid in ((WF, "orphan-1"), (WF, SLASHED), (WF, "ended-1"), (EXPORT, "exp-1")):
        asyncio.run(instance(simulator, workflow, iid, "running", CREATED))
    with LiveServer(["api"], **settings) as server:
        assert server.backends is not None
        store = server.backends.store.orphans

        async def seed() -> None:
            found = [
                OrphanSighting(i, "running", CREATED) for i in ("orphan-1", SLASHED, "ended-1")
            ]
            await store.record_scan(WF, found, NOW)
            await store.record_scan(EXPORT, [OrphanSighting("exp-1", "running", CREATED)], NOW)

        server.call(seed)
        yield server


def test_the_orphans_are_listed_and_paged_with_scope_read(live: LiveServer) -> None:
    with live.client("viewer-secret-0002") as viewer:
        first = viewer.get("/orphans", params={"limit": 2})
        assert first.status_code == 200, first.text
        page = first.json()
        assert [o["instance_id"] for o in page["orphans"]] == ["orphan-1", SLASHED]
        assert page["open"] == 4 and page["next_after"] == page["orphans"][1]["seq"]
        workflows = {w["name"]: w for w in page["workflows"]}
        assert workflows[WF]["watched_since"] is not None  # registered at serve's start
        assert (workflows[WF]["terminable"], workflows[EXPORT]["terminable"]) == (True, False)
        rest = viewer.get("/orphans", params={"after": page["next_after"]}).json()["orphans"]
        assert [o["instance_id"] for o in rest] == ["ended-1", "exp-1"]
        only = viewer.get("/orphans", params={"workflow": EXPORT}).json()
        assert [o["instance_id"] for o in only["orphans"]] == ["exp-1"] and only["open"] == 1

        unwatched = viewer.get("/orphans", params={"workflow": "nope"})
        assert unwatched.status_code == 422 and "'nope' is not watched" in unwatched.text
        assert viewer.get("/orphans", params={"state": "lost"}).status_code == 422

        history = viewer.get(path(WF, SLASHED))
        assert history.status_code == 200, history.text
        assert history.json()["orphan"]["instance_id"] == SLASHED
        assert [e["kind"] for e in history.json()["history"]] == ["found"]
        assert viewer.get(path(WF, "nope")).status_code == 404


def test_a_termination_needs_operate_and_json_and_is_recorded_with_the_token(
    live: LiveServer, simulator: SimulatorServer
) -> None:
    url = path(WF, SLASHED, "terminate")
    with live.client("viewer-secret-0002") as viewer:
        refused = viewer.post(url, json={}, headers=JSON)
        assert refused.status_code == 403 and "operate" in refused.text
    with live.client("admin-secret-0001") as admin:
        assert admin.post(url, content=b"{}").status_code == 415
        claimed = admin.post(url, json={"actor": "token:viewer"}, headers=JSON)
        assert claimed.status_code == 403 and "not who authenticated" in claimed.text
        dry = admin.post(url, json={"dry_run": True}, headers=JSON)
        assert dry.status_code == 200 and dry.json()["results"][0]["result"] == "would_terminate"
        assert asyncio.run(patches(simulator, WF, SLASHED)) == (0, "running")

        done = admin.post(url, json={"on_behalf_of": "bob"}, headers=JSON)
        assert done.status_code == 200, done.text
        assert done.json()["terminated"] == 1
        assert done.json()["results"][0]["result"] == "terminated"
        assert asyncio.run(patches(simulator, WF, SLASHED)) == (1, "terminated")

        # again: 409, nothing sent
        again = admin.post(url, headers=JSON)
        assert again.status_code == 409 and "already terminated" in again.text
        assert asyncio.run(patches(simulator, WF, SLASHED)) == (1, "terminated")

        history = admin.get(path(WF, SLASHED)).json()
        assert history["orphan"]["state"] == "terminated"
        assert [(e["kind"], e["actor"], e["on_behalf_of"]) for e in history["history"]] == [
            ("found", None, None),
            ("terminate_asked", "token:admin", "bob"),
            ("terminated", "token:admin", "bob"),
        ]


def test_terminations_refused_or_answered_otherwise_name_why(
    live: LiveServer, simulator: SimulatorServer
) -> None:
    asyncio.run(instance(simulator, WF, "ended-1", "complete", CREATED))
    with live.client("admin-secret-0001") as admin:
        barred = admin.post(path(EXPORT, "exp-1", "terminate"), headers=JSON)
        assert barred.status_code == 403 and "AUDITREC_TERMINATE_WORKFLOWS" in barred.text
        unknown = admin.post(path(WF, "nope", "terminate"), headers=JSON)
        assert unknown.status_code == 404 and "not an orphan" in unknown.text
        extra = admin.post(path(WF, "orphan-1", "terminate"), json={"colour": 1}, headers=JSON)
        assert extra.status_code == 422 and "colour" in extra.text

        # an instance that ended meanwhile: the API's 409 is already_ended, and it is gone
        ended = admin.post(path(WF, "ended-1", "terminate"), headers=JSON)
        assert ended.status_code == 200, ended.text
        assert ended.json()["results"][0]["result"] == "already_ended"
        assert admin.get(path(WF, "ended-1")).json()["orphan"]["state"] == "gone"
        gone = admin.post(path(WF, "ended-1", "terminate"), headers=JSON)
        assert gone.status_code == 409 and "no longer an orphan" in gone.text
    assert asyncio.run(patches(simulator, EXPORT, "exp-1")) == (0, "running")
    assert asyncio.run(patches(simulator, WF, "ended-1"))[0] == 1
