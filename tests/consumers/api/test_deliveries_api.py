"""``GET /deliveries`` and ``POST /deliveries/retry`` over HTTP against a live API (SQLite; the
store's both adapters are held to one contract in tests/contracts): what is parked, retries by
id (with the audit's others) or all, scopes, and refusals that name the problem."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from consumers.workflows.simulator.server import SimulatorServer
from tests.consumers.api.conftest import JSON, LiveServer, server_settings
from tests.consumers.api.ui.test_console_deliveries import (
    A1_FAILED,
    A1_OVERTURNED,
    FILTERED,
    HOOK,
    ON_HOOK,
    ON_QUEUE,
    PLAIN,
    QUEUE,
    SECRET,
    T0,
    oid,
)

TOKENS = "admin:admin-secret-0001:operate,viewer:viewer-secret-0002:read"


@pytest.fixture
def live(tmp_path: Path, simulator: SimulatorServer) -> Iterator[LiveServer]:
    settings = server_settings(
        tmp_path,
        simulator,
        api_tokens=TOKENS,
        webhook_urls=f"{FILTERED}, {PLAIN}",
        webhook_secret=SECRET,
        outcome_queue_id="q-outcomes",
    )
    with LiveServer(["api"], **settings) as server:
        backends = server.backends
        assert backends is not None
        store = backends.store.deliveries

        async def seed() -> None:
            await store.register(HOOK, "https://hooks.example/audits/in", T0)
            await store.park(ON_HOOK)
            await store.park(ON_QUEUE)

        server.call(seed)
        yield server


def test_the_parked_entries_and_the_endpoints_are_listed_and_paged(live: LiveServer) -> None:
    with live.client("viewer-secret-0002") as viewer:
        first = viewer.get("/deliveries", params={"endpoint": HOOK, "limit": 2})
        assert first.status_code == 200, first.text
        page = first.json()
        assert [p["outcome_id"] for p in page["parked"]] == [A1_FAILED, A1_OVERTURNED]
        assert page["total"] == len(ON_HOOK) and page["next_after"] == page["parked"][1]["seq"]
        assert page["parked"][1]["type"] == "audit.overturned"
        names = {e["name"]: e for e in page["endpoints"]}
        assert names[HOOK]["types"] == ["audit.failed", "audit.overturned"]
        assert names[HOOK]["target"] == "https://hooks.example/audits/in"  # no query
        assert names[QUEUE]["parked"] == len(ON_QUEUE) and names[QUEUE]["kind"] == "queue"
        second = viewer.get("/deliveries", params={"endpoint": HOOK, "after": page["next_after"]})
        assert second.json()["parked"][0]["outcome_id"] == oid(100)

        unknown = viewer.get("/deliveries", params={"endpoint": "webhook-nope"})
        assert unknown.status_code == 422 and "unknown endpoint 'webhook-nope'" in unknown.text
        assert viewer.get("/deliveries", params={"limit": 0}).status_code == 422


def test_a_retry_asks_for_the_audit_s_other_entries_and_needs_operate(live: LiveServer) -> None:
    body = {"ids": [A1_FAILED], "endpoint": HOOK}
    with live.client("viewer-secret-0002") as viewer:
        refused = viewer.post("/deliveries/retry", json=body, headers=JSON)
        assert refused.status_code == 403 and "operate" in refused.text
    with live.client("admin-secret-0001") as admin:
        dry = admin.post("/deliveries/retry", json={**body, "dry_run": True}, headers=JSON)
        assert dry.status_code == 200, dry.text
        assert [e["outcome_id"] for e in dry.json()["entries"]] == [A1_FAILED, A1_OVERTURNED]
        assert dry.json()["requested"] == 0

        done = admin.post("/deliveries/retry", json=body, headers=JSON)
        assert done.status_code == 200 and done.json()["requested"] == 2
        listed = admin.get("/deliveries", params={"endpoint": HOOK, "limit": 2}).json()
        assert [p["retry_requested_by"] for p in listed["parked"]] == ["token:admin"] * 2
        # the same entry parked on the queue is another delivery: not asked for
        on_queue = admin.get("/deliveries", params={"endpoint": QUEUE}).json()["parked"]
        assert [p["retry_requested_at"] for p in on_queue] == [None, None]

        every = admin.post("/deliveries/retry", json={"all": True}, headers=JSON)
        assert every.json()["requested"] == len(ON_HOOK) + len(ON_QUEUE) - 2


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({}, "give either ids or all: true"),
        ({"ids": [A1_FAILED], "all": True}, "give either ids or all: true"),
        ({"ids": []}, "name at least one parked entry"),
        ({"ids": ["out_1"]}, "'out_1' is not an outcome id"),
        ({"ids": [oid(999)]}, f"not parked: {oid(999)}"),
        ({"ids": [oid(9)], "endpoint": HOOK}, f"not parked on {HOOK}: {oid(9)}"),
        ({"all": True, "endpoint": "queue-other"}, "unknown endpoint 'queue-other'"),
        ({"all": True, "colour": "red"}, "colour"),
    ],
)
def test_a_retry_refused_names_the_problem_and_asks_for_nothing(
    live: LiveServer, body: dict[str, object], problem: str
) -> None:
    with live.client("admin-secret-0001") as admin:
        answer = admin.post("/deliveries/retry", json=body, headers=JSON)
        assert answer.status_code == 422, answer.text
        assert problem in answer.text
        listed = admin.get("/deliveries", params={"limit": 1000}).json()["parked"]
        assert all(p["retry_requested_at"] is None for p in listed)


def test_without_a_token_nothing_is_shown(live: LiveServer) -> None:
    assert httpx.get(f"{live.url}/deliveries", timeout=10).status_code == 401
