"""Status reads cannot starve the watchdog: a reader with a read token that asks about many
running audits spends at most ``AUDITREC_ON_DEMAND_BUDGET_SHARE`` of the shared probe budget,
and never the watchdog's floor (``AUDITREC_WATCHDOG_BUDGET_FLOOR``) even with the share at 1;
past it reads answer from the table (``"probed": false`` and why) and the watchdog's probes
still go out. Against a real ``serve`` (API and pipeline) and the Workflows simulator."""

from __future__ import annotations

from pathlib import Path

from consumers.workflows.ratelimit import ON_DEMAND, WATCHDOG
from consumers.workflows.simulator.server import SimulatorServer
from tests.cli import run_process
from tests.consumers.api.conftest import (
    API_AND_PIPELINE,
    JSON,
    LiveServer,
    publish,
    server_settings,
    started,
    unique,
    wait_for,
)

READER = "a-reader-token-0123456789"
OPERATOR = "an-operator-token-0123456789"
BUDGET = 20  # requests per window, the reads' share half of it
AUDITS = 20


def spent(live: LiveServer, spender: str) -> int:
    """The window's requests of ``spender``, as the store counts them for every process."""
    assert live.backends is not None
    backends = live.backends
    budget = backends.rate_limit()
    return live.call(
        lambda: backends.store.budget.requests_in_window(
            f"{backends.settings.cloudflare_api_url}/accounts/{backends.settings.account_id}",
            backends.now(),
            budget.window,
            spender=spender,
        )
    )


def test_many_reads_leave_the_watchdog_its_part_of_the_budget(
    tmp_path: Path, simulator: SimulatorServer
) -> None:
    audits = [unique("starve") for _ in range(AUDITS)]
    for audit_id in audits:
        simulator.sim.set_instance(f"wf-{audit_id}", "running")
    settings = server_settings(
        tmp_path,
        simulator,
        api_tokens=f"viewer:{READER}:read,ops:{OPERATOR}:operate",
        probe_budget=BUDGET,
        on_demand_budget_share=0.5,
        watchdog_interval="1h",  # the sweep below is the watchdog's only tick
        watchdog_batch_limit=AUDITS // 2,
        watchdog_bulk_limit=0,  # one request per audit, as a tick without the listing asks
    )
    with LiveServer(API_AND_PIPELINE, **settings) as live:
        live.wait_pipeline_live()
        with live.client(OPERATOR) as ops, live.client(READER) as reader:
            publish(ops, *(started(a, minutes_ago=30) for a in audits))
            for audit_id in audits:
                wait_for(ops, audit_id)

            # when a reader asks about every running audit
            reads = [reader.get(f"/audits/{a}") for a in audits]

            # then half the budget went to reads, and the other reads said why they were not
            # probed, answered from the table
            assert all(r.status_code == 200 for r in reads), [r.text for r in reads]
            bodies = [r.json() for r in reads]
            probed = [b for b in bodies if b["probed"]]
            refused = [b for b in bodies if not b["probed"]]
            assert len(probed) == BUDGET // 2
            assert all(b["reconciliation"]["result"] == "healthy" for b in probed)
            assert len(refused) == AUDITS - BUDGET // 2
            for body in refused:
                assert body["status"] == "running" and body["reconciliation"] is None
                assert "AUDITREC_ON_DEMAND_BUDGET_SHARE" in body["note"]
            assert spent(live, ON_DEMAND) == BUDGET // 2
            assert simulator.sim.stats()["total"] == BUDGET // 2

            # when the watchdog ticks over the audits the reads could not probe
            sweep = ops.post("/sweep", headers=JSON)

            # then every one of its probes went out and was answered
            assert sweep.status_code == 200, sweep.text
            summary = sweep.json()
            assert summary["probed"] == AUDITS // 2, summary
            assert summary["probe_errors"] == {}, summary
            assert summary["healthy"] == AUDITS // 2, summary
            assert spent(live, WATCHDOG) == AUDITS // 2
            assert simulator.sim.stats()["total"] == BUDGET
            # and the metric tells the spenders apart
            metrics = ops.get("/metrics").text
            assert 'result="spent",spender="watchdog"' in metrics
            assert 'result="spent",spender="on_demand"' in metrics


def test_with_the_whole_window_shared_to_reads_the_watchdog_still_gets_its_floor(
    tmp_path: Path, simulator: SimulatorServer
) -> None:
    floor = 6  # 0.3 of the budget of 20, the default floor
    audits = [unique("floor") for _ in range(AUDITS)]
    for audit_id in audits:
        simulator.sim.set_instance(f"wf-{audit_id}", "running")
    settings = server_settings(
        tmp_path,
        simulator,
        api_tokens=f"viewer:{READER}:read,ops:{OPERATOR}:operate",
        probe_budget=BUDGET,
        on_demand_budget_share=1.0,
        watchdog_interval="1h",  # the sweep below is the watchdog's only tick
        watchdog_batch_limit=floor,
        watchdog_bulk_limit=0,  # one request per audit
    )
    with LiveServer(API_AND_PIPELINE, **settings) as live:
        live.wait_pipeline_live()
        with live.client(OPERATOR) as ops, live.client(READER) as reader:
            publish(ops, *(started(a, minutes_ago=30) for a in audits))
            for audit_id in audits:
                wait_for(ops, audit_id)

            # when a reader allowed the whole window asks about every running audit
            bodies = [reader.get(f"/audits/{a}").json() for a in audits]

            # then the reads stopped at the floor, saying why
            assert sum(b["probed"] for b in bodies) == BUDGET - floor
            for body in (b for b in bodies if not b["probed"]):
                assert "AUDITREC_WATCHDOG_BUDGET_FLOOR" in body["note"], body
            assert spent(live, ON_DEMAND) == BUDGET - floor

            # when the watchdog ticks over the audits the reads left
            sweep = ops.post("/sweep", headers=JSON)

            # then all of its probes went out and were answered
            assert sweep.status_code == 200, sweep.text
            summary = sweep.json()
            assert (summary["probed"], summary["healthy"]) == (floor, floor), summary
            assert summary["probe_errors"] == {}, summary
            assert spent(live, WATCHDOG) == floor
            assert simulator.sim.stats()["total"] == BUDGET


def test_a_floor_out_of_range_or_leaving_reads_nothing_stops_serve(env: dict[str, str]) -> None:
    for extra in (
        {"AUDITREC_WATCHDOG_BUDGET_FLOOR": "1"},
        {"AUDITREC_WATCHDOG_BUDGET_FLOOR": "-0.1"},
        {"AUDITREC_WATCHDOG_BUDGET_FLOOR": "0.99", "AUDITREC_PROBE_BUDGET": "50"},
    ):
        refused = run_process("serve", env={**env, **extra}, timeout=30.0)
        assert refused.returncode == 2, refused.stderr[-2000:]
        assert "AUDITREC_WATCHDOG_BUDGET_FLOOR" in refused.stderr
        assert "Traceback" not in refused.stderr


def test_a_share_out_of_range_stops_serve_naming_the_variable(env: dict[str, str]) -> None:
    for share in ("0", "1.01", "-0.5"):
        refused = run_process(
            "serve", env={**env, "AUDITREC_ON_DEMAND_BUDGET_SHARE": share}, timeout=30.0
        )
        assert refused.returncode == 2, refused.stderr[-2000:]
        assert "AUDITREC_ON_DEMAND_BUDGET_SHARE" in refused.stderr
        assert "Traceback" not in refused.stderr
