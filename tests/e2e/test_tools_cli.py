"""``auditrec dead-letters`` and ``auditrec backtest`` as an operator runs them, through the
real entry point, on the embedded pair (both pairs: tests/consumers/operations and tests/consumers/api);
``dead-letters purge`` on both pairs."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from consumers.eventlog.codec import dead_letter
from consumers.eventlog.factory import open_event_log
from consumers.eventlog.port import OutRecord, Record, Topics
from tests.conftest import Backend
from tests.e2e.test_cli_e2e import envelope, run

HOSTILE = b'{"type": "AuditStarted", "audit_id": "a-dl", "data": {"project_id": "p-1"'


@pytest.fixture
def env(backend: Backend) -> dict[str, str]:
    return backend.environ(AUDITREC_LOG_FORMAT="json")


def write_raw(backend: Backend, record: OutRecord) -> None:
    """A record written to the lifecycle topic directly, as another service might."""

    async def write() -> None:
        async with open_event_log(backend.event_log_url, Topics(backend.topic_prefix)) as log:
            await log.append([record])

    asyncio.run(write())


# (the CLI on the embedded pair; dead letters are tested on both pairs in tests/consumers/operations and
# over HTTP in tests/consumers/api)
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_hostile_record_is_listed_shown_and_replayed_once_corrected(
    backend: Backend, env: dict[str, str], tmp_path: Path
) -> None:
    assert run(backend, "init", env=env).returncode == 0
    lifecycle = f"{backend.topic_prefix}.lifecycle.v1"
    write_raw(backend, OutRecord(lifecycle, "a-dl", HOSTILE))
    drained = run(backend, "serve", "--only", "projector", "--until-idle", env=env)
    assert drained.returncode == 0, drained.stderr

    # the projector set it aside: listed with its consumer, origin and reason
    listed = run(backend, "dead-letters", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    (item,) = json.loads(listed.stdout)["dead_letters"]
    position = item["position"]
    assert item["consumer"] == f"{backend.topic_prefix}-projector"
    assert item["origin"]["topic"] == lifecycle and item["reason"].startswith("not valid JSON")
    text = run(backend, "dead-letters", "list", env=env).stdout
    assert text.startswith(f"{position}  ") and f"{lifecycle}/" in text and "not valid JSON" in text
    # found by the consumer group's name, or by the component's
    for consumer in (f"{backend.topic_prefix}-projector", "projector"):
        found = run(backend, "dead-letters", "list", "--consumer", consumer, "--json", env=env)
        assert [d["position"] for d in json.loads(found.stdout)["dead_letters"]] == [position]
    for consumer in ("reconciler", "projector-"):
        found = run(backend, "dead-letters", "list", "--consumer", consumer, "--json", env=env)
        assert json.loads(found.stdout)["dead_letters"] == [], consumer

    shown = run(backend, "dead-letters", "show", position, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "reason:   not valid JSON" in shown.stdout
    assert HOSTILE.decode() in shown.stdout and "still does not decode" in shown.stdout

    # as it is, it is refused with the reason
    refused = run(backend, "dead-letters", "replay", position, env=env)
    assert refused.returncode == 2
    assert "still does not decode: not valid JSON" in refused.stderr

    # corrected, it is replayed; asked again, nothing more is published
    body = tmp_path / "fixed.json"
    body.write_text(envelope("AuditStarted", "a-dl", datetime.now(UTC), project_id="p-1"))
    done = run(backend, "dead-letters", "replay", position, "--body", str(body), env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"replayed {position} to {lifecycle} as event ")
    again = run(backend, "dead-letters", "replay", position, "--body", str(body), "--json", env=env)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["published"] is False
    assert run(backend, "serve", "--only", "projector", "--until-idle", env=env).returncode == 0
    rows = json.loads(run(backend, "audits", "--json", env=env).stdout)
    assert [(r["audit_id"], r["status"], r["version"]) for r in rows] == [("a-dl", "running", 1)]
    assert "[replayed]" in run(backend, "dead-letters", "list", env=env).stdout

    # positions that hold nothing are named
    bad = run(backend, "dead-letters", "show", "nowhere", env=env)
    assert bad.returncode == 2 and "invalid dead-letter position 'nowhere'" in bad.stderr
    missing = run(backend, "dead-letters", "show", "0:999", env=env)
    assert missing.returncode == 1 and "no dead letter at 0:999" in missing.stderr


def observation(audit_id: str, status: str, when: datetime) -> str:
    """What the probe appends (no publisher may send it: written to the log, as the probe does)."""
    return json.dumps(
        {
            "event_id": str(uuid.uuid4()),
            "schema_version": 1,
            "type": "WorkflowStatusObserved",
            "audit_id": audit_id,
            "occurred_at": when.isoformat(),
            "producer": "auditrec-probe",
            "data": {
                "workflow_instance_id": f"wf-{audit_id}",
                "status": status,
                "trigger": "watchdog",
                "observed_at": when.isoformat(),
            },
        }
    )


# (the CLI on the embedded pair; the operation itself is tested on both in tests/consumers/operations)
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_backtest_reports_the_audits_a_shorter_grace_would_have_failed(
    backend: Backend, env: dict[str, str]
) -> None:
    t0 = datetime.now(UTC) - timedelta(hours=3)
    lines, observations = [], []
    for audit_id, age in [("a-3m", 3), ("a-7m", 7), ("a-12m", 12)]:
        lines.append(
            envelope(
                "AuditStarted", audit_id, t0, project_id="p", workflow_instance_id=f"wf-{audit_id}"
            )
        )
        observations.append(
            (audit_id, observation(audit_id, "not_found", t0 + timedelta(minutes=age)))
        )
    assert run(backend, "init", env=env).returncode == 0
    assert run(backend, "publish", "-", env=env, input="\n".join(lines)).returncode == 0
    lifecycle = Topics(backend.topic_prefix).lifecycle
    for audit_id, body in observations:
        write_raw(backend, OutRecord(lifecycle, audit_id, body.encode()))
    drained = run(backend, "serve", "--only", "reconciler,projector", "--until-idle", env=env)
    assert drained.returncode == 0, drained.stderr
    rows = {
        r["audit_id"]: r["status"]
        for r in json.loads(run(backend, "audits", "--json", env=env).stdout)
    }
    assert rows == {"a-3m": "running", "a-7m": "running", "a-12m": "failed"}

    # under the policy in force: no difference
    same = run(backend, "backtest", "--json", env=env)
    assert same.returncode == 0, same.stderr
    assert json.loads(same.stdout)["differences"] == []

    # with a 5 minute grace: the audit observed at 7m would have failed then
    tested = run(backend, "backtest", "--set", "INSTANCE_LOST_GRACE=5m", "--json", env=env)
    assert tested.returncode == 0, tested.stderr
    data = json.loads(tested.stdout)
    assert [(d["audit_id"], d["kind"]) for d in data["differences"]] == [("a-7m", "failed")]
    assert data["summary"] == {"instance_lost": {"failed": 1}}
    text = run(backend, "backtest", "--set", "auditrec_instance_lost_grace=5m", env=env).stdout
    assert "instance_lost_grace_s 600.0 → 300.0" in text
    assert "a-7m  failed  [instance_lost]  would fail instance_lost at" in text
    assert "instance_lost: failed 1" in text

    # an unknown setting or a bad value is named
    unknown = run(backend, "backtest", "--set", "LOST_GRACE=5m", env=env)
    assert unknown.returncode == 2 and "LOST_GRACE: not a policy setting" in unknown.stderr
    bad = run(backend, "backtest", "--set", "FINALIZE_GRACE=soon", env=env)
    assert bad.returncode == 2 and "FINALIZE_GRACE=soon: not a duration" in bad.stderr


def test_dead_letters_are_purged_only_with_yes_and_the_purge_is_logged(
    backend: Backend, env: dict[str, str]
) -> None:
    assert run(backend, "init", env=env).returncode == 0
    lifecycle = f"{backend.topic_prefix}.lifecycle.v1"
    topics = Topics(backend.topic_prefix)
    source = Record(lifecycle, 0, 3, "a-dl", HOSTILE)
    write_raw(backend, dead_letter(topics, source, "projector", "not valid JSON"))

    # without --yes: counted, nothing purged, exit 2 naming the flag
    preview = run(backend, "dead-letters", "purge", "--older-than", "0s", env=env)
    assert preview.returncode == 2, preview.stderr
    assert "needs --yes" in preview.stderr and "would purge 1 dead letter(s)" in preview.stdout
    listed = run(backend, "dead-letters", "list", "--json", env=env)
    assert len(json.loads(listed.stdout)["dead_letters"]) == 1

    # a duration that is none, or out of range, is refused naming the flag
    for bad in ("soon", "36526d", "-1d"):
        refused = run(backend, "dead-letters", "purge", "--older-than", bad, "--yes", env=env)
        assert refused.returncode == 2 and "--older-than" in refused.stderr, refused.stderr

    # with --yes it is purged, and the purge is logged with who did it
    done = run(backend, "dead-letters", "purge", "--older-than", "0s", "--yes", "--json", env=env)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert (data["dead_letters"], data["dry_run"]) == (1, False)
    assert data["actor"].startswith("cli:")
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    (logged,) = [line for line in lines if line.get("event") == "dead letters purged"]
    assert (logged["actor"], logged["dead_letters"]) == (data["actor"], 1)
    listed = run(backend, "dead-letters", "list", "--json", env=env)
    assert json.loads(listed.stdout)["dead_letters"] == []
