"""``auditrec brake`` as an operator uses it, on both backend pairs: a sweep (in-process, no
serve) that would fail too many audits is held; ``brake`` shows it; ``release`` asks for
``--yes``, then lets the failures through; ``discard`` on nothing held is a no-op."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from consumers.workflows.simulator.server import SimulatorServer
from tests.conftest import Backend
from tests.e2e.test_cli_e2e import envelope, run


@pytest.fixture
def env(backend: Backend, simulator: SimulatorServer) -> dict[str, str]:
    return backend.environ(
        AUDITREC_CLOUDFLARE_API_URL=simulator.url,
        AUDITREC_CLOUDFLARE_ACCOUNT_ID="acct-1",
        AUDITREC_SWEEP_WAIT="30s",
        AUDITREC_LOG_FORMAT="json",
    )


def test_brake_holds_a_mass_failure_and_an_operator_releases_it(
    backend: Backend, env: dict[str, str]
) -> None:
    old = datetime.now(UTC) - timedelta(hours=1)
    lines = [
        envelope("AuditStarted", f"gone-{i}", old, project_id="p", workflow_instance_id=f"wf-{i}")
        for i in range(21)
    ]
    assert run(backend, "init", env=env).returncode == 0
    assert run(backend, "publish", "-", env=env, input="\n".join(lines)).returncode == 0

    # a sweep finds all 21 instances gone: held, not failed — not done (exit 1), and why
    swept = run(backend, "sweep", "--inline", "--json", env=env)
    assert swept.returncode == 1, swept.stderr
    summary = json.loads(swept.stdout)
    assert (summary["held"], summary["failed"], summary["pending"]) == (21, {}, 0)
    assert summary["brake"]["engaged"] is True and summary["brake"]["held"] == 21
    assert "the mass-failure brake held 21 decision(s) of this sweep" in swept.stderr

    shown = run(backend, "brake", env=env)
    assert shown.returncode == 0
    assert "brake ENGAGED" in shown.stdout and "held decisions: 21" in shown.stdout

    # release without --yes does nothing and says why
    refused = run(backend, "brake", "release", "--reason", "blip over", env=env)
    assert refused.returncode == 2
    assert "would release 21 held decision(s)" in refused.stdout
    assert "needs --yes" in refused.stderr
    assert json.loads(run(backend, "brake", "--json", env=env).stdout)["engaged"] is True

    released = run(backend, "brake", "release", "--yes", "--json", env=env)
    assert released.returncode == 0, released.stderr
    data = json.loads(released.stdout)
    assert (data["holds"], data["was_engaged"], data["dry_run"]) == (21, True, False)

    # the failures take effect when the pipeline runs (here: an in-process drain)
    assert (
        run(backend, "serve", "--only", "projector,reconciler", "--until-idle", env=env).returncode
        == 0
    )
    listed = json.loads(run(backend, "audits", "--status", "failed", "--json", env=env).stdout)
    assert sorted(r["audit_id"] for r in listed) == sorted(f"gone-{i}" for i in range(21))
    assert {r["error_code"] for r in listed} == {"instance_lost"}
    status = json.loads(run(backend, "brake", "--json", env=env).stdout)
    assert (status["engaged"], status["held"]) == (False, 0)
    assert status["last_ended"]["how"] == "released"
    assert status["last_ended"]["by"].startswith("cli:")
    replay = run(backend, "replay", "gone-0", env=env)
    assert "hold_released" in replay.stdout

    nothing = run(backend, "brake", "discard", "--yes", env=env)
    assert nothing.returncode == 0 and "discarded 0 held decision(s)" in nothing.stdout
