"""A bad record on the lifecycle log is set aside once, whoever sets it aside: a real
``serve`` of every component on the embedded backends (the projector, the reconciler and
telemetry each read the log and each refuse the record) keeps one dead letter of it, with each
consumer's reason, as ``auditrec dead-letters list`` shows. A record stored once for every
consumer would multiply what a flood of bad records costs the dead-letter topic."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from consumers.eventlog.dead_letters import read_dead_letter
from consumers.eventlog.factory import open_event_log
from consumers.eventlog.port import OutRecord, Record, Topics
from consumers.workflows.simulator.server import SimulatorServer
from tests.cli import run_process
from tests.consumers.api.conftest import CaptureServer
from tests.e2e.serving import serve
from tests.eventually import eventually_sync
from tests.pipeline import read_topic

PREFIX = "audit"  # the default AUDITREC_TOPIC_PREFIX
LIFECYCLE_CONSUMERS = {f"{PREFIX}-projector", f"{PREFIX}-reconciler", f"{PREFIX}-telemetry"}
BAD = b"\xffnot json"


def on_the_log(url: str, work: Any) -> Any:
    async def go() -> Any:
        async with open_event_log(url, Topics(PREFIX)) as log:
            return await work(log)

    return asyncio.run(go())


def listed(env: dict[str, str]) -> list[dict[str, Any]]:
    result = run_process("dead-letters", "list", "--json", env=env, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    letters: list[dict[str, Any]] = json.loads(result.stdout)["dead_letters"]
    return letters


def test_a_bad_record_is_one_dead_letter_with_every_consumers_reason(
    env: dict[str, str], tmp_path: Path, simulator: SimulatorServer
) -> None:
    # given serve with every component, telemetry included (a PostHog of our own)
    posthog = CaptureServer().start()
    full = {
        **env,
        "AUDITREC_CLOUDFLARE_API_URL": simulator.url,
        "AUDITREC_CLOUDFLARE_ACCOUNT_ID": "acct-1",
        "AUDITREC_CLOUDFLARE_API_TOKEN": "cf-token",
        "AUDITREC_WATCHDOG_INTERVAL": "24h",
        "AUDITREC_POSTHOG_API_KEY": "phc_test",
        "AUDITREC_POSTHOG_HOST": posthog.url,
        "AUDITREC_METRICS_PORT": "0",
    }
    try:
        assert run_process("init", env=full, timeout=60).returncode == 0
        with serve(full, tmp_path / "serve.log"):
            # when a record that is no event lands on the lifecycle log
            lifecycle = Topics(PREFIX).lifecycle
            url = full["AUDITREC_EVENT_LOG_URL"]
            on_the_log(url, lambda log: log.append([OutRecord(lifecycle, "a-bad", BAD)]))

            # then every consumer of the log sets it aside, each with its reason
            letters = eventually_sync(
                lambda: listed(full),
                until=lambda got: (
                    bool(got) and {r["consumer"] for r in got[0]["reasons"]} >= LIFECYCLE_CONSUMERS
                ),
                timeout=60,
                interval=0.5,
                message="every lifecycle consumer's reason",
            )
    finally:
        posthog.stop()

    # in one dead letter, listed once, naming the record and each consumer's reason
    (letter,) = letters
    assert letter["origin"]["topic"] == lifecycle and letter["key"] == "a-bad"
    reasons = {r["consumer"]: r["reason"] for r in letter["reasons"]}
    assert set(reasons) == LIFECYCLE_CONSUMERS and len(letter["reasons"]) == 3
    assert all(reason.startswith("not valid JSON") for reason in reasons.values()), reasons
    # found by any of its consumers
    for consumer in LIFECYCLE_CONSUMERS:
        result = run_process("dead-letters", "list", "--consumer", consumer, "--json", env=full)
        assert [d["position"] for d in json.loads(result.stdout)["dead_letters"]] == [
            letter["position"]
        ], consumer
    # and the topic holds the record's bytes once: the other reasons are notes beside it
    records: list[Record] = on_the_log(url, lambda log: read_topic(log, Topics(PREFIX).dead_letter))
    copies = [d for r in records if (d := read_dead_letter(r)) is not None and d.origin]
    assert [c.original for c in copies] == [BAD]
