"""``auditrec sweep`` while the mass-failure brake holds, against a running serve on both
backend pairs: the sweep that engages the brake, and the next one (its audits already held),
return as soon as every outcome is known or held — well within ``AUDITREC_SWEEP_WAIT`` — say
what is held and the brake's state, and exit 1 (not done) with the reason on stderr."""

from __future__ import annotations

import json
import resource
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from consumers.workflows.simulator.server import SimulatorServer
from tests.cli import AUDITREC
from tests.conftest import Backend
from tests.e2e.test_cli_e2e import audits, envelope, run
from tests.eventually import eventually_sync

SWEEP_WAIT = 60.0
GONE = [f"gone-{i}" for i in range(5)]


@pytest.fixture
def env(backend: Backend, simulator: SimulatorServer) -> dict[str, str]:
    return backend.environ(
        AUDITREC_CLOUDFLARE_API_URL=simulator.url,
        AUDITREC_CLOUDFLARE_ACCOUNT_ID="acct-1",
        AUDITREC_SWEEP_WAIT=f"{SWEEP_WAIT:.0f}s",
        AUDITREC_BRAKE_MIN_AUDITS="3",
        AUDITREC_LOG_FORMAT="json",
    )


def sweep(env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """``auditrec sweep`` in its own process: the result, its wall time and its CPU time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(
        [AUDITREC, "sweep", *args], env=env, capture_output=True, text=True, timeout=SWEEP_WAIT * 2
    )
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done, wall, cpu


def test_a_sweep_the_brake_holds_returns_at_once_says_so_and_exits_1(
    backend: Backend, env: dict[str, str], tmp_path: Path
) -> None:
    old = datetime.now(UTC) - timedelta(hours=2)
    lines = [
        envelope("AuditStarted", a, old, project_id="p", workflow_instance_id=f"wf-{a}")
        for a in GONE
    ]
    assert run(backend, "init", env=env).returncode == 0
    assert run(backend, "publish", "-", env=env, input="\n".join(lines)).returncode == 0
    with (tmp_path / "serve.log").open("w") as log_file:
        serve = subprocess.Popen(
            [AUDITREC, "serve", "--only", "projector,reconciler,probe"],
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        eventually_sync(
            lambda: audits(backend, env),
            until=lambda rows: len(rows) == len(GONE),
            timeout=60,
            interval=0.3,
            message="serve to project the audits",
        )

        # the sweep that finds every instance gone: the brake engages and holds them all
        first, wall, _ = sweep(env, "--json")
        assert first.returncode == 1, first.stdout + first.stderr
        summary = json.loads(first.stdout)
        assert (summary["held"], summary["pending"], summary["failed"]) == (len(GONE), 0, {})
        assert summary["brake"]["engaged"] is True and summary["brake"]["held"] == len(GONE)
        assert f"the mass-failure brake held {len(GONE)} decision(s)" in first.stderr
        assert "auditrec brake release" in first.stderr
        assert wall < SWEEP_WAIT / 3, wall

        # the next sweep: the audits are already held (the reconciler records nothing new),
        # so their outcomes are known at once — not waited for until AUDITREC_SWEEP_WAIT
        again, wall, cpu = sweep(env)
        assert again.returncode == 1, again.stdout + again.stderr
        assert f"held        {len(GONE)} (held by the brake" in again.stdout
        assert "brake       ENGAGED since" in again.stdout
        assert f"{len(GONE)} decision(s) held" in again.stdout
        assert "pending" not in again.stdout
        assert "the brake is engaged since" in again.stderr
        assert wall < SWEEP_WAIT / 3, wall
        assert cpu < 10, (cpu, wall)  # no loop burning a core while it waits
        print(f"second sweep: {wall:.2f}s wall, {cpu:.2f}s CPU")
        for row in audits(backend, env).values():
            assert row["status"] == "running"  # held, not failed
    finally:
        serve.terminate()
        serve.wait(timeout=30)
