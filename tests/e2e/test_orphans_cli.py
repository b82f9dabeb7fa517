"""``auditrec orphans`` as an operator uses it, on both backend pairs against the Workflows
simulator: ``init`` registers the watched workflows, a scan finds orphans, the list shows them,
``terminate`` previews without ``--yes`` (exit 2), terminates once (the simulator counts the
PATCHes; again: already terminated, nothing sent), refuses a workflow not in
AUDITREC_TERMINATE_WORKFLOWS (exit 2), lists ``--all`` first, and ``show`` replays who did
what."""

from __future__ import annotations

import asyncio
import getpass
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from consumers.components.orphans import OrphanScan
from consumers.workflows.client import WorkflowsClient
from consumers.workflows.simulator.server import SimulatorServer
from projections.factory import open_store
from tests.conftest import Backend
from tests.e2e.test_cli_e2e import run
from tests.eventually import eventually_sync
from tests.orphaned import instance, patches

WF, EXPORT = "site-audit", "site-export"


@pytest.fixture
def env(backend: Backend, simulator: SimulatorServer) -> dict[str, str]:
    return backend.environ(
        AUDITREC_CLOUDFLARE_API_URL=simulator.url,
        AUDITREC_CLOUDFLARE_ACCOUNT_ID="acct-1",
        AUDITREC_CLOUDFLARE_WORKFLOWS=EXPORT,
        AUDITREC_TERMINATE_WORKFLOWS=WF,
    )


async def given_orphans(backend: Backend, sim: SimulatorServer, now: datetime) -> None:
    """Watched for two hours; three orphans an hour old (one id with a slash and a space),
    found by a scan."""
    async with open_store(backend.database_url) as store:
        await store.init()
        await store.orphans.watch([WF, EXPORT], now - timedelta(hours=2))
        for workflow, iid in ((WF, "orphan-1"), (WF, "orphan 2/x"), (EXPORT, "exp-1")):
            await instance(sim, workflow, iid, "running", now - timedelta(hours=1))
        async with WorkflowsClient(
            api_url=sim.url, account_id="acct-1", workflow=WF, api_token=None
        ) as client:
            scan = OrphanScan(
                store, client, workflows=[WF, EXPORT], grace=timedelta(minutes=10),
                interval=timedelta(hours=1), owner="test", clock=lambda: now,
            )  # fmt: skip
            assert await scan.scan(now) is not None


def listed(backend: Backend, env: dict[str, str], *args: str) -> dict[str, Any]:
    answer = run(backend, "orphans", *args, "--json", env=env)
    assert answer.returncode == 0, answer.stderr
    data: dict[str, Any] = json.loads(answer.stdout)
    return data


def test_orphans_are_listed_terminated_once_and_replayed(
    backend: Backend, env: dict[str, str], simulator: SimulatorServer
) -> None:
    now = datetime.now(UTC)
    asyncio.run(given_orphans(backend, simulator, now))
    init = run(backend, "init", env=env)
    assert init.returncode == 0, init.stderr
    # init registers, but never moves, when a workflow is watched since
    assert f"workflow {WF}: watched since {(now - timedelta(hours=2)).isoformat()}" in init.stdout

    # the list: the workflows, then the orphans
    data = listed(backend, env)
    assert [(w["name"], w["open"], w["terminable"]) for w in data["workflows"]] == [
        (WF, 2, True), (EXPORT, 1, False),
    ]  # fmt: skip
    assert {(o["workflow"], o["instance_id"]) for o in data["orphans"]} == {
        (WF, "orphan-1"), (WF, "orphan 2/x"), (EXPORT, "exp-1"),
    }  # fmt: skip
    assert [o["instance_id"] for o in listed(backend, env, "--workflow", EXPORT)["orphans"]] == [
        "exp-1"
    ]
    text = run(backend, "orphans", env=env)
    assert text.returncode == 0 and f"{WF}/orphan 2/x  running  open" in text.stdout
    unwatched = run(backend, "orphans", "--workflow", "nope", env=env)
    assert unwatched.returncode == 2 and "'nope' is not watched" in unwatched.stderr

    # without --yes: a preview, nothing sent, exit 2
    preview = run(backend, "orphans", "terminate", f"{WF}/orphan-1", env=env)
    assert preview.returncode == 2, preview.stderr
    assert "would terminate 1 orphan(s)" in preview.stdout and "needs --yes" in preview.stderr
    assert asyncio.run(patches(simulator, WF, "orphan-1")) == (0, "running")

    # with --yes: terminated, once
    done = run(backend, "orphans", "terminate", "orphan-1", "--yes", "--operator", "alice", env=env)
    assert done.returncode == 0, done.stderr
    assert f"{WF}/orphan-1  terminated" in done.stdout
    assert asyncio.run(patches(simulator, WF, "orphan-1")) == (1, "terminated")
    again = run(backend, "orphans", "terminate", f"{WF}/orphan-1", "--yes", env=env)
    assert again.returncode == 0 and "already terminated" in again.stdout
    assert asyncio.run(patches(simulator, WF, "orphan-1")) == (1, "terminated")

    # a workflow not in AUDITREC_TERMINATE_WORKFLOWS is refused, nothing sent
    refused = run(backend, "orphans", "terminate", "--workflow", EXPORT, "exp-1", "--yes", env=env)
    assert refused.returncode == 2 and "AUDITREC_TERMINATE_WORKFLOWS" in refused.stderr
    assert asyncio.run(patches(simulator, EXPORT, "exp-1")) == (0, "running")

    # --all lists first; an instance that ended meanwhile answers 409: already ended
    asyncio.run(instance(simulator, WF, "orphan 2/x", "complete", now - timedelta(hours=1)))
    every = run(backend, "orphans", "terminate", "--all", "--yes", env=env)
    assert every.returncode == 0, every.stderr
    lines = every.stdout.splitlines()
    skipped = f"  {EXPORT}/exp-1  skipped: its workflow is not in AUDITREC_TERMINATE_WORKFLOWS"
    assert lines == [
        "terminating 1 orphan(s):",
        f"  {WF}/orphan 2/x  would_terminate",
        skipped,
        "terminated 0 of 1 orphan(s):",
        f"  {WF}/orphan 2/x  already_ended: complete",
    ]
    assert asyncio.run(patches(simulator, WF, "orphan 2/x")) == (1, "complete")
    assert listed(backend, env)["workflows"][0]["open"] == 0

    # show replays who did what
    shown = run(backend, "orphans", "show", f"{WF}/orphan-1", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    history = json.loads(shown.stdout)["history"]
    actor = f"cli:{getpass.getuser()}"
    assert [(e["kind"], e["actor"], e["on_behalf_of"]) for e in history] == [
        ("found", None, None), ("terminate_asked", actor, "alice"), ("terminated", actor, "alice"),
    ]  # fmt: skip
    text = run(backend, "orphans", "show", "--workflow", WF, "orphan 2/x", env=env)
    assert text.returncode == 0 and "already_ended" in text.stdout
    unknown = run(backend, "orphans", "show", f"{WF}/nope", env=env)
    assert unknown.returncode == 1 and "no orphan 'nope'" in unknown.stderr


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_served_watchdog_registers_the_workflows_and_scans_for_orphans(
    backend: Backend, tmp_path: Path, simulator: SimulatorServer
) -> None:
    from tests.consumers.api.conftest import LiveServer, server_settings

    settings = server_settings(
        tmp_path,
        simulator,
        event_log_url=backend.event_log_url,
        database_url=backend.database_url,
        cloudflare_workflows=EXPORT,
        orphan_interval="1s",
        instance_lost_grace="1s",
    )
    with LiveServer(["projector", "watchdog"], **settings) as live:
        backends = live.backends
        assert backends is not None
        watched = live.call(backends.store.orphans.watched)
        assert set(watched) == {WF, EXPORT}
        # an instance created after the watch began, no audit holding it
        created = max(watched.values()) + timedelta(milliseconds=10)
        asyncio.run(instance(simulator, EXPORT, "late-1", "running", created))
        found = eventually_sync(
            lambda: live.call(lambda: backends.store.orphans.page()),
            until=lambda page: [o.instance_id for o in page] == ["late-1"],
            message="the served watchdog to find the orphan",
        )
    # (the API gives created_on in milliseconds)
    assert found[0].workflow == EXPORT
    assert found[0].created_on == created.replace(microsecond=created.microsecond // 1000 * 1000)
