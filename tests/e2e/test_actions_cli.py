"""``auditrec fail``, ``restore`` and ``probe`` as an operator uses them, on the embedded pair
(the same actions run on both pairs over HTTP, tests/consumers/api/test_actions_api.py): each records ``--operator`` (or ``cli:<user>``), refusals exit non-zero naming the problem,
bulk forms only list without ``--yes`` (exit 2), and ``replay`` shows who acted."""

from __future__ import annotations

import getpass
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
        AUDITREC_LOG_FORMAT="json",
    )


def drain(backend: Backend, env: dict[str, str]) -> None:
    done = run(backend, "serve", "--only", "projector,reconciler", "--until-idle", env=env)
    assert done.returncode == 0, done.stderr


def row(backend: Backend, env: dict[str, str], audit_id: str) -> dict[str, object]:
    shown = run(backend, "status", audit_id, "--no-probe", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    data: dict[str, object] = json.loads(shown.stdout)
    return data


# (the CLI on the embedded pair; the same actions run on both pairs over HTTP in tests/consumers/api)
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_fail_restore_and_probe_from_the_command_line(
    backend: Backend, env: dict[str, str], simulator: SimulatorServer
) -> None:
    old = datetime.now(UTC) - timedelta(hours=1)
    simulator.sim.set_instance("wf-ok", "running")
    lines = [
        envelope("AuditStarted", "cli-ok", old, project_id="p-1", workflow_instance_id="wf-ok"),
        envelope("AuditStarted", "cli-wf", old, project_id="p-1", workflow_instance_id="wf-x"),
        envelope(
            "AuditFailed", "cli-wf", old, error_code="oom", error_detail="OOM", failed_by="workflow"
        ),
    ]
    assert run(backend, "init", env=env).returncode == 0
    assert run(backend, "publish", "-", env=env, input="\n".join(lines)).returncode == 0
    drain(backend, env)

    # a dry run publishes nothing
    preview = run(backend, "fail", "cli-ok", "--code", "oom", "--reason", "r", "--dry-run", env=env)
    assert preview.returncode == 0 and "would fail cli-ok: running → failed" in preview.stdout
    drain(backend, env)
    assert row(backend, env, "cli-ok")["status"] == "running"

    # fail, naming the operator
    failed = run(
        backend,
        "fail",
        "cli-ok",
        "--code",
        "deploy_reset",
        "--reason",
        "stuck after the deploy",
        "--operator",
        "alice",
        "--json",
        env=env,
    )
    assert failed.returncode == 0, failed.stderr
    # (the actor is who ran it; the name given is the person acted for, beside it)
    answer = json.loads(failed.stdout)
    assert (answer["actor"], answer["on_behalf_of"]) == (f"cli:{getpass.getuser()}", "alice")
    drain(backend, env)
    assert (row(backend, env, "cli-ok")["status"], row(backend, env, "cli-ok")["failed_by"]) == (
        "failed",
        "operator",
    )

    # refusals: an unknown code names the valid ones; a workflow failure is never restored
    bogus = run(backend, "fail", "cli-ok", "--code", "bogus", "--reason", "r", env=env)
    assert bogus.returncode == 2 and "step_timeout" in bogus.stderr
    again = run(backend, "fail", "cli-ok", "--code", "oom", "--reason", "r", env=env)
    assert again.returncode == 1 and "only a running audit can be failed" in again.stderr
    refused = run(backend, "restore", "cli-wf", "--reason", "r", env=env)
    assert refused.returncode == 1 and "failed by workflow" in refused.stderr
    unknown = run(backend, "restore", "nobody", "--reason", "r", env=env)
    assert unknown.returncode == 1 and "unknown audit 'nobody'" in unknown.stderr

    # restore (by the default operator, cli:<user>), then probe in-process
    back = run(backend, "restore", "cli-ok", "--reason", "it was alive", env=env)
    assert back.returncode == 0 and "restored cli-ok: failed → running" in back.stdout
    drain(backend, env)
    assert row(backend, env, "cli-ok")["status"] == "running"
    probed = run(backend, "probe", "cli-ok", "--inline", "--json", env=env)
    assert probed.returncode == 0, probed.stderr
    assert json.loads(probed.stdout)["outcome"]["result"] == "healthy"

    # replay shows who acted
    replay = run(backend, "replay", "cli-ok", "--json", env=env)
    steps = json.loads(replay.stdout)
    rules = [s["rule"] for s in steps if s["type"] in ("AuditFailed", "AuditRestored")]
    assert rules == ["operator_failed", "restored"]
    reasons = " ".join(s["reason"] for s in steps)
    me = f"cli:{getpass.getuser()}"
    assert f"by operator {me} on behalf of alice" in reasons and f"undone by {me}" in reasons
    assert "(manual probe by cli:" in reasons


# (the CLI on the embedded pair; bulk actions run on both pairs over HTTP in tests/consumers/api)
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_bulk_fail_and_restore_list_and_exit_2_without_yes_and_act_with_it(
    backend: Backend, env: dict[str, str]
) -> None:
    old = datetime.now(UTC) - timedelta(hours=3)
    lines = [
        envelope("AuditStarted", f"bulk-{i}", old, project_id="p-bulk", workflow_instance_id="w")
        for i in range(3)
    ]
    lines.append(envelope("AuditStarted", "young", datetime.now(UTC), project_id="p-bulk"))
    assert run(backend, "init", env=env).returncode == 0
    assert run(backend, "publish", "-", env=env, input="\n".join(lines)).returncode == 0
    drain(backend, env)
    select = ["--project", "p-bulk", "--older-than", "2h"]

    listed = run(backend, "fail", "--code", "oom", "--reason", "bulk", *select, env=env)
    assert listed.returncode == 2, listed.stderr  # as `brake release` without --yes
    assert "would fail 3 of 3 matching audit(s)" in listed.stdout  # the preview, printed
    assert "error: nothing done: the bulk `auditrec fail` needs --yes" in listed.stderr
    as_json = run(backend, "fail", "--code", "oom", "--reason", "bulk", *select, "--json", env=env)
    assert as_json.returncode == 2 and json.loads(as_json.stdout)["dry_run"] is True
    asked = run(backend, "fail", "--code", "oom", "--reason", "bulk", *select, "--dry-run", env=env)
    assert asked.returncode == 0 and "would fail 3 of 3" in asked.stdout
    assert "dry run: nothing published" in asked.stderr
    unasked = run(backend, "restore", "--code", "oom", "--reason", "undo", env=env)
    assert unasked.returncode == 2
    assert "error: nothing done: the bulk `auditrec restore` needs --yes" in unasked.stderr
    drain(backend, env)
    assert all(row(backend, env, f"bulk-{i}")["status"] == "running" for i in range(3))

    acted = run(backend, "fail", "--code", "oom", "--reason", "bulk", *select, "--yes", env=env)
    assert acted.returncode == 0 and "fail: done for 3 of 3" in acted.stdout
    drain(backend, env)
    assert all(row(backend, env, f"bulk-{i}")["status"] == "failed" for i in range(3))
    assert row(backend, env, "young")["status"] == "running"

    both = run(backend, "restore", "bulk-0", "--reason", "x", "--code", "oom", env=env)
    assert both.returncode == 2 and "not both" in both.stderr
    undone = run(
        backend, "restore", "--code", "oom", "--reason", "undo", "--yes", "--json", env=env
    )
    assert undone.returncode == 0, undone.stderr
    assert json.loads(undone.stdout)["acted"] == 3
    drain(backend, env)
    assert all(row(backend, env, f"bulk-{i}")["status"] == "running" for i in range(3))


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_serve_refuses_a_malformed_token_list_naming_the_entry_not_the_secret(
    backend: Backend, env: dict[str, str]
) -> None:
    env = {**env, "AUDITREC_API_TOKENS": "viewer:fine-0123456789abc:read,ops:hunter2:admin"}
    refused = run(backend, "serve", "--only", "api", env=env, timeout=60)

    assert refused.returncode == 2
    assert "AUDITREC_API_TOKENS: entry 2 ('ops')" in refused.stderr
    assert "unknown scope" in refused.stderr
    assert "hunter2" not in refused.stderr + refused.stdout
