"""``auditrec doctor`` as a user runs it: healthy setups on both backend pairs, then one broken
service at a time (a closed port, an uninitialised log or database, a token or workflow the
Workflows simulator refuses, an event subscription's queue that is unknown, refused or has no
pull consumer, an unreachable PostHog host), each reported with its fix, and
nothing created or migrated by doctor itself."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from consumers.workflows.answers import PROBABLE_CAUSE
from consumers.workflows.simulator.server import SimulatorServer
from projections.sqlite.schema import SCHEMA_VERSION as SQLITE_SCHEMA_VERSION
from statemachine.events import ProbeFailureReason
from tests import cli
from tests.conftest import Backend, backend_pair
from tests.services import kafka_bootstrap

AUDITREC = str(Path(sys.executable).with_name("auditrec"))
TOKEN = "cf-doctor-token-0123456789abcdef"
CHECKS = [
    "event log",
    "database",
    "workflows api",
    "event subscription",
    "posthog",
    "outcome feed",
    "clock",
    "api",
]


def doctor(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return cli.run(*args, "doctor", "--json", env=env)


def report(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def checks(result: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report(result)["checks"]}


def failed(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [name for name, c in checks(result).items() if not c["ok"]]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def environ(backend: Backend, simulator: SimulatorServer, **extra: str) -> dict[str, str]:
    simulator.sim.token = TOKEN
    settings = {
        "AUDITREC_CLOUDFLARE_API_URL": simulator.url,
        "AUDITREC_CLOUDFLARE_ACCOUNT_ID": "acct-1",
        "AUDITREC_CLOUDFLARE_API_TOKEN": TOKEN,
        "AUDITREC_LOG_FORMAT": "json",
    }
    return backend.environ(**{**settings, **extra})


def init(env: dict[str, str]) -> None:
    result = cli.run("init", env=env)
    assert result.returncode == 0, result.stderr


@pytest.fixture
def sqlite_pair(tmp_path: Path) -> Backend:
    return Backend(
        "sqlite", f"sqlite:///{tmp_path}/events.db", f"sqlite:///{tmp_path}/audits.db", "doc"
    )


# -- healthy ------------------------------------------------------------------------------


def test_a_healthy_setup_passes_every_check(backend: Backend, simulator: SimulatorServer) -> None:
    env = environ(backend, simulator)
    init(env)

    result = doctor(env)

    assert result.returncode == 0, result.stdout + result.stderr
    found = checks(result)
    assert list(found) == CHECKS
    assert all(c["ok"] and c["fix"] is None for c in found.values()), found
    assert "schema version" in found["database"]["detail"]
    assert f"{backend.topic_prefix}.lifecycle.v1" in found["event log"]["detail"]
    assert found["posthog"]["detail"] == "telemetry off (AUDITREC_POSTHOG_API_KEY unset)"


def test_the_text_report_shows_the_configuration_then_a_tick_per_check(
    sqlite_pair: Backend, simulator: SimulatorServer
) -> None:
    env = environ(sqlite_pair, simulator)
    init(env)

    result = subprocess.run(
        [AUDITREC, "doctor"], env=env, capture_output=True, text=True, timeout=60
    )

    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "configuration"
    assert any(
        line.split()[:2] == ["AUDITREC_CLOUDFLARE_WORKFLOW", "site-audit"]
        and line.endswith("[default]")
        for line in lines
    )
    assert any(line.split()[:2] == ["AUDITREC_CLOUDFLARE_ACCOUNT_ID", "acct-1"] for line in lines)
    ticks = lines[lines.index("checks") + 1 :]
    assert [line.split(":")[0].strip() for line in ticks] == [f"✓ {name}" for name in CHECKS]


# -- secrets ------------------------------------------------------------------------------


def test_secrets_are_masked(sqlite_pair: Backend, simulator: SimulatorServer) -> None:
    posthog_key = "phc_doctor_secret_key_0123456789"
    env = environ(
        sqlite_pair,
        simulator,
        AUDITREC_POSTHOG_API_KEY=posthog_key,
        AUDITREC_POSTHOG_HOST=simulator.root_url,
        AUDITREC_API_TOKENS="tok-first-secret1,viewer:tok-viewer-secret:read",
        AUDITREC_DATABASE_URL="postgresql://auditrec:pg-secret-pw@127.0.0.1:1/audits",
    )

    for args in ([], ["--json"]):
        result = subprocess.run(
            [AUDITREC, "doctor", *args], env=env, capture_output=True, text=True, timeout=60
        )
        shown = result.stdout + result.stderr
        secrets = (TOKEN, posthog_key, "pg-secret-pw", "tok-first-secret1", "tok-viewer-secret")
        for secret in secrets:
            assert secret not in shown

    config = {s["variable"]: s for s in report(doctor(env))["config"]}
    assert config["AUDITREC_CLOUDFLARE_API_TOKEN"] == {
        "variable": "AUDITREC_CLOUDFLARE_API_TOKEN",
        "value": "cf…ef",
        "source": "env",
        "path": None,
    }
    # the tokens by name and scope, never their secrets
    assert config["AUDITREC_API_TOKENS"]["value"] == "token-1:operate, viewer:read"
    assert config["AUDITREC_DATABASE_URL"]["value"] == (
        "postgresql://auditrec:********@127.0.0.1:1/audits"
    )
    assert config["AUDITREC_MODE"] == {
        "variable": "AUDITREC_MODE",
        "value": "enforce",
        "source": "default",
        "path": None,
    }


def test_a_flag_is_reported_as_the_source(sqlite_pair: Backend, simulator: SimulatorServer) -> None:
    env = environ(sqlite_pair, simulator)
    other = sqlite_pair.database_url.replace("audits.db", "other.db")

    result = doctor(env, "--database-url", other)

    config = {s["variable"]: s for s in report(result)["config"]}
    assert config["AUDITREC_DATABASE_URL"]["value"] == other
    assert config["AUDITREC_DATABASE_URL"]["source"] == "flag"
    assert config["AUDITREC_EVENT_LOG_URL"]["source"] == "env"


# -- SQLite paths ---------------------------------------------------------------------------


def test_a_relative_sqlite_url_is_shown_resolved_with_the_absolute_url_to_write(
    simulator: SimulatorServer, tmp_path: Path
) -> None:
    """``sqlite:///tmp/…`` is relative: doctor names the file it resolves to from the working
    directory, and how to write the absolute URL (running `init` would create another file)."""
    here = tmp_path / "cwd"
    here.mkdir()
    (tmp_path / "tmp").mkdir()
    absolute = Backend(
        "sqlite", f"sqlite:///{tmp_path}/events.db", f"sqlite:///{tmp_path}/tmp/audits.db", "doc"
    )
    init(environ(absolute, simulator))  # the database the operator meant: initialised
    relative = f"sqlite://{tmp_path}/tmp/audits.db"  # three slashes: relative to the cwd
    env = environ(absolute, simulator, AUDITREC_DATABASE_URL=relative)

    result = subprocess.run(
        [AUDITREC, "doctor", "--json"], env=env, cwd=here, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip

    assert result.returncode == 1, result.stdout + result.stderr
    resolved = f"{here}{tmp_path}/tmp/audits.db"
    database = checks(result)["database"]
    assert database["detail"] == f"SQLite {resolved}: not initialised"
    assert database["fix"].startswith(
        f"AUDITREC_DATABASE_URL={relative} is relative to the working directory ({here}), so it "
        f"names {resolved}; for the file at {tmp_path}/tmp/audits.db write "
        f"sqlite:///{tmp_path}/tmp/audits.db (four slashes)"
    )
    config = {c["variable"]: c for c in report(result)["config"]}
    assert config["AUDITREC_DATABASE_URL"]["path"] == resolved
    assert config["AUDITREC_EVENT_LOG_URL"]["path"] == f"{tmp_path}/events.db"
    assert not Path(resolved).exists()  # doctor created nothing there
    # the advice followed: the database meant, initialised, passes
    fixed = doctor({**env, "AUDITREC_DATABASE_URL": f"sqlite:///{tmp_path}/tmp/audits.db"})
    assert checks(fixed)["database"]["ok"], fixed.stdout


def test_the_text_report_shows_where_each_sqlite_url_resolves(
    sqlite_pair: Backend, simulator: SimulatorServer, tmp_path: Path
) -> None:
    result = subprocess.run(
        [AUDITREC, "doctor"], env=environ(sqlite_pair, simulator), capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip

    lines = result.stdout.splitlines()
    for variable, file in (("AUDITREC_EVENT_LOG_URL", "events.db"),
                           ("AUDITREC_DATABASE_URL", "audits.db")):  # fmt: skip
        line = next(x for x in lines if x.split()[:1] == [variable])
        assert line.split()[1:4] == [f"sqlite:///{tmp_path}/{file}", "→", f"{tmp_path}/{file}"]


# -- broken services ----------------------------------------------------------------------


def test_unreachable_kafka(sqlite_pair: Backend, simulator: SimulatorServer) -> None:
    env = environ(
        sqlite_pair, simulator, AUDITREC_EVENT_LOG_URL=f"kafka://127.0.0.1:{closed_port()}"
    )
    init(environ(sqlite_pair, simulator))  # the database is fine

    started = time.monotonic()
    result = doctor(env)

    assert time.monotonic() - started < 30
    assert result.returncode == 1
    assert failed(result) == ["event log", "clock"]
    log = checks(result)["event log"]
    assert "Kafka unreachable" in log["detail"]
    assert "AUDITREC_EVENT_LOG_URL" in log["fix"]


def test_unreachable_postgres(sqlite_pair: Backend, simulator: SimulatorServer) -> None:
    url = f"postgresql://postgres@127.0.0.1:{closed_port()}/postgres"
    env = environ(sqlite_pair, simulator, AUDITREC_DATABASE_URL=url)
    init(environ(sqlite_pair, simulator))

    result = doctor(env)

    assert result.returncode == 1
    assert failed(result) == ["database"]
    database = checks(result)["database"]
    assert database["detail"].startswith("PostgreSQL unreachable: ")
    assert "ConnectionRefusedError" in database["detail"]
    assert database["fix"] == "check AUDITREC_DATABASE_URL and that the database is up"


def test_an_uninitialised_setup_is_reported_and_left_as_it_was(
    backend: Backend, simulator: SimulatorServer, tmp_path: Path
) -> None:
    env = environ(backend, simulator)

    result = doctor(env)

    assert result.returncode == 1
    assert failed(result) == ["event log", "database"]
    found = checks(result)
    assert "not initialised" in found["database"]["detail"]
    if backend.name == "sqlite":
        # each file named by its absolute path, and the advice says what it creates
        assert found["event log"]["fix"] == f"run `auditrec init` (it creates {tmp_path}/events.db)"
        assert found["database"]["detail"] == f"SQLite {tmp_path}/audits.db: not initialised"
        assert found["database"]["fix"] == f"run `auditrec init` (it creates {tmp_path}/audits.db)"
        assert not (tmp_path / "events.db").exists()
        assert not (tmp_path / "audits.db").exists()
    else:
        assert found["event log"]["fix"] == "run `auditrec init`"
        assert found["database"]["fix"] == "run `auditrec init`"
        assert "topics missing" in found["event log"]["detail"]
        assert not set(asyncio.run(_kafka_topics())) & {
            f"{backend.topic_prefix}.lifecycle.v1",
            f"{backend.topic_prefix}.probe-requests.v1",
            f"{backend.topic_prefix}.dead-letter.v1",
        }
        assert asyncio.run(_has_migrations_table(backend.database_url)) is False


def test_missing_topics_of_an_existing_embedded_log(
    sqlite_pair: Backend, simulator: SimulatorServer, tmp_path: Path
) -> None:
    env = environ(sqlite_pair, simulator)
    init(env)
    with sqlite3.connect(tmp_path / "events.db") as conn:
        conn.execute("DELETE FROM topics WHERE name = 'doc.dead-letter.v1'")

    result = doctor(env)

    assert result.returncode == 1
    assert failed(result) == ["event log"]
    assert checks(result)["event log"]["detail"] == (
        f"embedded log {tmp_path}/events.db reachable; topics missing: doc.dead-letter.v1"
    )
    # the other four topics: doctor created none
    with sqlite3.connect(tmp_path / "events.db") as conn:
        assert conn.execute("SELECT count(*) FROM topics").fetchone() == (4,)


def test_an_old_schema_is_reported_not_migrated(
    sqlite_pair: Backend, simulator: SimulatorServer, tmp_path: Path
) -> None:
    env = environ(sqlite_pair, simulator)
    init(env)
    with sqlite3.connect(tmp_path / "audits.db") as conn:
        conn.execute("UPDATE schema_version SET version = 1")

    result = doctor(env)

    assert result.returncode == 1
    database = checks(result)["database"]
    assert database["detail"] == (
        f"SQLite {tmp_path}/audits.db reachable; schema version 1, this release uses "
        f"{SQLITE_SCHEMA_VERSION}"
    )
    assert database["fix"] == "run `auditrec init` (it migrates the schema)"
    with sqlite3.connect(tmp_path / "audits.db") as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchone() == (1,)


def test_a_token_the_api_refuses(sqlite_pair: Backend, simulator: SimulatorServer) -> None:
    env = environ(sqlite_pair, simulator, AUDITREC_CLOUDFLARE_API_TOKEN="cf-wrong-token-abcdef")
    init(env)

    result = doctor(env)

    assert result.returncode == 1
    assert failed(result) == ["workflows api"]
    workflows = checks(result)["workflows api"]
    assert "unauthorized: HTTP 403" in workflows["detail"]
    assert workflows["fix"] == PROBABLE_CAUSE[ProbeFailureReason.UNAUTHORIZED]
    assert "cf-wrong-token-abcdef" not in result.stdout + result.stderr


def test_an_unknown_workflow(sqlite_pair: Backend, simulator: SimulatorServer) -> None:
    env = environ(sqlite_pair, simulator, AUDITREC_CLOUDFLARE_WORKFLOW="no-such-workflow")
    init(env)

    result = doctor(env)

    assert result.returncode == 1
    assert failed(result) == ["workflows api"]
    workflows = checks(result)["workflows api"]
    assert "workflow_not_found" in workflows["detail"]
    assert workflows["fix"] == PROBABLE_CAUSE[ProbeFailureReason.WORKFLOW_NOT_FOUND]


def test_every_watched_workflow_must_exist(
    sqlite_pair: Backend, simulator: SimulatorServer
) -> None:
    simulator.sim.add_workflow("keyword-research")
    env = environ(
        sqlite_pair, simulator, AUDITREC_CLOUDFLARE_WORKFLOWS="keyword-research, no-such-flow"
    )
    init(env)

    result = doctor(env)

    assert result.returncode == 1
    assert failed(result) == ["workflows api"]
    workflows = checks(result)["workflows api"]
    assert workflows["detail"].startswith("workflow 'no-such-flow': workflow_not_found")
    assert "AUDITREC_CLOUDFLARE_WORKFLOWS" in workflows["fix"]

    env["AUDITREC_CLOUDFLARE_WORKFLOWS"] = "keyword-research"
    assert checks(doctor(env))["workflows api"]["ok"] is True


def test_blind_probing_is_a_failure(sqlite_pair: Backend, simulator: SimulatorServer) -> None:
    env = environ(sqlite_pair, simulator)
    init(env)
    del env["AUDITREC_CLOUDFLARE_API_URL"], env["AUDITREC_CLOUDFLARE_API_TOKEN"]

    result = doctor(env)

    assert result.returncode == 2  # serve refuses to probe blind: a configuration refused
    assert failed(result) == ["workflows api"] and report(result)["refused"] == ["workflows api"]
    workflows = checks(result)["workflows api"]
    assert workflows["detail"] == "probing is blind"
    assert workflows["fix"].startswith(
        "probing Cloudflare's Workflows API needs AUDITREC_CLOUDFLARE_API_TOKEN; set it"
    )


# -- the event subscription's queue ------------------------------------------------------


def queue(simulator: SimulatorServer, queue_id: str, **config: Any) -> None:
    """A queue in the simulator, made through its control API."""
    answer = httpx.put(
        f"{simulator.root_url}/_sim/queues/{queue_id}",
        json=config,
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text


def test_the_queue_is_checked_without_pulling(
    sqlite_pair: Backend, simulator: SimulatorServer
) -> None:
    env = environ(sqlite_pair, simulator, AUDITREC_CLOUDFLARE_QUEUE_ID="site-audit-events")
    queue(simulator, "site-audit-events")
    init(env)

    result = doctor(env)

    assert result.returncode == 0, result.stdout + result.stderr
    subscription = checks(result)["event subscription"]
    assert subscription["ok"] and subscription["fix"] is None
    assert "'site-audit-events'" in subscription["detail"]
    assert "has an HTTP pull consumer" in subscription["detail"]
    stats = simulator.sim.queue_stats("site-audit-events")
    assert (stats["pulls"], stats["acks"]) == (0, 0)  # nothing leased, nothing moved


def test_an_unknown_queue_names_the_queue_and_the_setting(
    sqlite_pair: Backend, simulator: SimulatorServer
) -> None:
    env = environ(sqlite_pair, simulator, AUDITREC_CLOUDFLARE_QUEUE_ID="no-such-queue")
    queue(simulator, "site-audit-events")
    init(env)

    result = doctor(env)

    assert result.returncode == 1
    assert failed(result) == ["event subscription"]
    subscription = checks(result)["event subscription"]
    assert "queue 'no-such-queue' of account 'acct-1': not_found" in subscription["detail"]
    assert "AUDITREC_CLOUDFLARE_QUEUE_ID" in subscription["fix"]
    assert "id, not its name" in subscription["fix"]


def test_a_queues_token_the_api_refuses_asks_for_queues_permission(
    sqlite_pair: Backend, simulator: SimulatorServer
) -> None:
    env = environ(
        sqlite_pair,
        simulator,
        AUDITREC_CLOUDFLARE_QUEUE_ID="site-audit-events",
        AUDITREC_CLOUDFLARE_QUEUES_TOKEN="cf-wrong-queues-token-abcdef",
    )
    queue(simulator, "site-audit-events")
    init(env)

    result = doctor(env)

    assert result.returncode == 1
    assert failed(result) == ["event subscription"]  # the API token still reads workflows
    subscription = checks(result)["event subscription"]
    assert "unauthorized" in subscription["detail"]
    assert "Queues permission" in subscription["fix"]
    assert "AUDITREC_CLOUDFLARE_QUEUES_TOKEN" in subscription["fix"]
    assert "cf-wrong-queues-token-abcdef" not in result.stdout + result.stderr


def test_a_queue_a_worker_consumes_has_no_pull_consumer(
    sqlite_pair: Backend, simulator: SimulatorServer
) -> None:
    env = environ(sqlite_pair, simulator, AUDITREC_CLOUDFLARE_QUEUE_ID="site-audit-events")
    queue(simulator, "site-audit-events", consumer="worker")
    init(env)

    result = doctor(env)

    assert result.returncode == 1
    assert failed(result) == ["event subscription"]
    subscription = checks(result)["event subscription"]
    assert "has no HTTP pull consumer (consumers: worker)" in subscription["detail"]
    assert "wrangler queues consumer http add site-audit-events" in subscription["fix"]
    assert simulator.sim.queue_stats("site-audit-events")["pulls"] == 0


def test_posthog_host_reachable_or_not(sqlite_pair: Backend, simulator: SimulatorServer) -> None:
    on = {"AUDITREC_POSTHOG_API_KEY": "phc_doctor_key_0123456789"}
    env = environ(sqlite_pair, simulator)
    init(env)
    unreachable = f"http://127.0.0.1:{closed_port()}"

    down = doctor({**env, **on, "AUDITREC_POSTHOG_HOST": unreachable})
    up = doctor({**env, **on, "AUDITREC_POSTHOG_HOST": simulator.root_url})

    assert down.returncode == 1
    assert failed(down) == ["posthog"]
    posthog = checks(down)["posthog"]
    assert posthog["detail"].startswith(f"{unreachable} unreachable: ConnectError")
    assert "AUDITREC_POSTHOG_HOST" in posthog["fix"]
    assert up.returncode == 0, up.stdout
    assert checks(up)["posthog"]["detail"].startswith(f"{simulator.root_url} answers (HTTP ")


def test_the_outcome_feed_refused_as_serve_refuses_it_and_its_endpoints_reached(
    sqlite_pair: Backend, simulator: SimulatorServer
) -> None:
    env = environ(sqlite_pair, simulator)
    init(env)
    secret = "whsec_" + base64.b64encode(b"s" * 32).decode()
    unreachable = f"http://127.0.0.1:{closed_port()}/hook"

    no_secret = doctor({**env, "AUDITREC_WEBHOOK_URLS": simulator.root_url + "/hook"})
    bad_filter = doctor(
        {
            **env,
            "AUDITREC_WEBHOOK_URLS": f"{simulator.root_url}/h#audit.gone",
            "AUDITREC_WEBHOOK_SECRET": secret,
        }
    )
    down = doctor({**env, "AUDITREC_WEBHOOK_URLS": unreachable, "AUDITREC_WEBHOOK_SECRET": secret})
    up = doctor(
        {
            **env,
            "AUDITREC_WEBHOOK_URLS": simulator.root_url + "/hook?token=t0p",
            "AUDITREC_WEBHOOK_SECRET": secret,
        }
    )

    assert no_secret.returncode == 2 and failed(no_secret) == ["outcome feed"]
    assert report(no_secret)["refused"] == ["outcome feed"]
    assert (
        "AUDITREC_WEBHOOK_URLS needs AUDITREC_WEBHOOK_SECRET"
        in checks(no_secret)["outcome feed"]["detail"]
    )
    assert "'audit.gone'" in checks(bad_filter)["outcome feed"]["detail"]
    assert down.returncode == 1 and failed(down) == ["outcome feed"]
    assert report(down)["refused"] == []
    assert "unreachable: ConnectError" in checks(down)["outcome feed"]["detail"]
    assert up.returncode == 0, up.stdout
    detail = checks(up)["outcome feed"]["detail"]
    assert detail.startswith("webhook-") and "answers (HTTP " in detail
    assert "t0p" not in up.stdout  # the URL's query (a receiver's token) is never shown


@pytest.mark.kafka
@pytest.mark.postgres
def test_records_stamped_ahead_of_this_clock(simulator: SimulatorServer, tmp_path: Path) -> None:
    with backend_pair("kafka+postgres", tmp_path, f"t{time.time_ns() % 10**10}") as backend:
        env = environ(backend, simulator)
        init(env)
        assert doctor(env).returncode == 0
        asyncio.run(_append_stamped(f"{backend.topic_prefix}.dead-letter.v1", ahead_s=120))

        result = doctor(env)

    assert result.returncode == 1
    assert failed(result) == ["clock"]
    clock = checks(result)["clock"]
    assert clock["detail"].startswith(
        f"a record on {backend.topic_prefix}.dead-letter.v1 is stamped 1"
    )
    assert clock["fix"].startswith("sync the clock (NTP)")


# -- helpers talking to the real services -------------------------------------------------


async def _kafka_topics() -> list[str]:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap())
    await admin.start()
    try:
        return await admin.list_topics()
    finally:
        await admin.close()


async def _append_stamped(topic: str, ahead_s: float) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap())
    await producer.start()
    try:
        stamp = int((time.time() + ahead_s) * 1000)
        await producer.send_and_wait(topic, b"{}", timestamp_ms=stamp)
    finally:
        await producer.stop()


async def _has_migrations_table(url: str) -> bool:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        return bool(
            await conn.fetchval("SELECT to_regclass('public.schema_migrations') IS NOT NULL")
        )
    finally:
        await conn.close()
