"""Chaos: two ``auditrec serve`` processes (every component) on Kafka + PostgreSQL, the
Workflows simulator and a local PostHog, while audits stream in and the processes are
SIGKILLed (each restarted at once under its identity), the broker and the database restarted.

The audits' outcomes are known in advance (:mod:`tests.chaos.plan`). Once the faults are over
and the table has settled, nothing may be lost or wrong, no audit decided twice, PostHog must
have one event per reconciler failure, and the table must equal a rebuild of the log into a
fresh database. Recovery after each SIGKILL is measured and reported (target: p90 ≤ 15 s).

The size comes from the environment (:mod:`tests.chaos.profile`): ``make test`` runs a short
profile, ``make chaos`` a long one. The summary is printed at the end of the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import httpx
import pytest

from consumers.eventlog.codec import encode
from consumers.eventlog.factory import open_event_log
from consumers.eventlog.port import EventLog, Topics
from consumers.runtime.settings import load_settings
from consumers.workflows.simulator.server import SimulatorServer
from projections.row import AuditRow
from statemachine.errors import EventLogError
from statemachine.events import AuditEvent
from tests.chaos.plan import Audit, markers, plan
from tests.chaos.processes import (
    ServeSlot,
    ensure_services_up,
    restart_service,
    restartable,
    run_cli,
)
from tests.chaos.profile import RECOVERY_TARGET, Profile
from tests.chaos.verdict import (
    KILLS,
    Figures,
    Recovery,
    differences,
    judge,
    p90,
    projector_lag,
    read_log,
    same_rows,
    table,
)
from tests.conftest import Backend, kafka_and_postgres
from tests.consumers.api.conftest import CaptureServer, free_port
from tests.eventually import eventually
from tests.services import kafka_bootstrap, postgres_url

PROFILE = Profile.from_env()
PARTITIONS = 6
RECOVERY_WAIT = 120.0  # seconds a fault may take to recover before it counts as a hang
pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.kafka, pytest.mark.postgres]

# Short watchdog and probe settings, so that a run takes minutes; a budget that never binds.
SERVE_SETTINGS = {
    "AUDITREC_KAFKA_LIFECYCLE_PARTITIONS": str(PARTITIONS),
    "AUDITREC_WATCHDOG_INTERVAL": "2s",
    "AUDITREC_WATCHDOG_BATCH_LIMIT": "100",
    "AUDITREC_PROBE_BUDGET": "1000000",
    "AUDITREC_PROBE_CONCURRENCY": "16",
    "AUDITREC_PROBE_TIMEOUT": "5s",
    "AUDITREC_CLOUDFLARE_ACCOUNT_ID": "acc-chaos",
    "AUDITREC_POSTHOG_API_KEY": "phc_chaos",
    "AUDITREC_LOG_FORMAT": "json",
}


def schedule(profile: Profile, rng: random.Random) -> list[str]:
    """The faults in order: single kills and crash loops (a process killed, restarted and
    killed again while it starts: two kills) in a random order, with the service restarts
    spread among them."""
    loops = profile.kills // 4
    faults = ["kill"] * (profile.kills - 2 * loops) + ["crashloop"] * loops
    rng.shuffle(faults)
    for j, service in enumerate(profile.restarts):
        at = round((j + 1) * len(faults) / (len(profile.restarts) + 1)) + j
        faults.insert(at, service)
    return faults


def chunks(audits: list[Audit], parts: int) -> list[list[Audit]]:
    size = -(-len(audits) // parts)
    return [audits[i * size : (i + 1) * size] for i in range(parts)]


async def append_retrying(log: EventLog, events: list[AuditEvent]) -> None:
    """Append, retrying retriable failures (a service coming back) for up to a minute."""
    records = [encode(log.topics.lifecycle, e) for e in events]

    async def appended() -> bool:
        try:
            await log.append(records)
        except EventLogError as exc:
            if not exc.retriable:
                raise
            raise AssertionError(f"append refused: {exc}") from exc
        return True

    await eventually(appended, timeout=60, interval=0.5, message="the events to be appended")


async def ready(port: int) -> bool:
    async with httpx.AsyncClient(timeout=5) as client:
        try:
            answer = await client.get(f"http://127.0.0.1:{port}/readyz")
        except httpx.HTTPError as exc:
            raise AssertionError(f"no answer: {exc}") from exc
    return answer.status_code == 200


async def statuses(database_url: str, audit_ids: list[str]) -> dict[str, str]:
    """The status of each of ``audit_ids`` in the table (a connection of its own: the
    database may be restarting; then, as an AssertionError, "not yet")."""
    try:
        conn = await asyncpg.connect(database_url, timeout=5)
    except (OSError, asyncpg.PostgresError) as exc:
        raise AssertionError(f"database unreachable: {exc}") from exc
    try:
        got = await conn.fetch(
            "SELECT audit_id, status FROM audits WHERE audit_id = ANY($1::text[])", audit_ids
        )
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise AssertionError(f"query failed: {exc}") from exc
    finally:
        with contextlib.suppress(Exception):
            await conn.close()
    return {r["audit_id"]: r["status"] for r in got}


class Run:
    """One chaos run: the plan, the serve slots, the publisher and the figures."""

    def __init__(
        self,
        profile: Profile,
        backend: Backend,
        env: dict[str, str],
        sim: SimulatorServer,
        log_dir: Path,
        figures: Figures,
    ) -> None:
        self.profile = profile
        self.backend = backend
        self.sim = sim
        self.rng = random.Random(profile.seed)
        self.audits = plan(profile.audits, self.rng, datetime.now(UTC))
        self.published: list[Audit] = []
        self.to_overturn: list[Audit] = []  # failed (to be), their completion not yet sent
        self.slots = [ServeSlot(n, env, free_port(), log_dir) for n in range(2)]
        self.figures = figures
        figures.audits = len(self.audits)

    async def main(self, log: EventLog) -> None:
        for slot in self.slots:
            slot.start()
        for slot in self.slots:  # the first kill must find a process at work, not starting
            await eventually(
                functools.partial(ready, slot.port),
                timeout=120,
                interval=0.2,
                message=f"{slot.identity} to be ready",
            )
        faults = schedule(self.profile, self.rng)
        faults = [f for f in faults if f not in self.figures.restarts_skipped]
        parts = chunks(self.audits, len(faults) + 1)
        closing: list[AuditEvent] = []
        for i, fault in enumerate(faults):
            closing = await self.publish(log, parts[i], closing)
            await asyncio.sleep(self.rng.uniform(0.0, 3.0))  # on purpose: a random fault point
            await self.fault(log, i, fault)
        closing = await self.publish(log, parts[-1], closing)
        await asyncio.sleep(1.0)  # on purpose: the last completions arrive a moment later
        await append_retrying(log, closing)
        self.figures.events_published += len(closing)
        await self.overturn(log, wait=True)

    async def publish(
        self, log: EventLog, audits: list[Audit], closing: list[AuditEvent]
    ) -> list[AuditEvent]:
        """Seed and publish ``audits`` with the completions of the chunk before; returns
        their completions, to be published with the next chunk."""
        events = list(closing)
        for audit in audits:
            audit.seed(self.sim.sim)
            events += audit.opening(self.rng)
        await append_retrying(log, events)
        self.published += audits
        self.figures.events_published += len(events)
        self.to_overturn += [a for a in audits if a.completion == "after_failure"]
        await self.overturn(log)
        return [e for a in audits if a.completion == "next" for e in a.closing(self.rng)]

    async def overturn(self, log: EventLog, *, wait: bool = False) -> None:
        """Publish the completions of the audits to overturn that have failed by now (with
        ``wait``: of all of them, once they have)."""
        ids = [a.audit_id for a in self.to_overturn]
        if not ids:
            return
        try:
            got = await eventually(
                lambda: statuses(self.backend.database_url, ids),
                until=lambda got: not wait or list(got.values()).count("failed") == len(ids),
                timeout=120 if wait else 5,
                interval=0.5,
                message="the audits to overturn to fail first",
            )
        except AssertionError as exc:
            if not wait:
                return
            self.figures.notes.append(str(exc)[:300])
            got = {a: "failed" for a in ids}  # published anyway: they show as wrong
        failed = [a for a in self.to_overturn if got.get(a.audit_id) == "failed"]
        self.to_overturn = [a for a in self.to_overturn if got.get(a.audit_id) != "failed"]
        events = [e for a in failed for e in a.closing(self.rng)]
        if events:
            await append_retrying(log, events)
            self.figures.events_published += len(events)

    async def fault(self, log: EventLog, index: int, fault: str) -> None:
        if fault in KILLS:
            slot = self.rng.choice(self.slots)
            slot.kill()
            began = slot.start()
            what = f"SIGKILL {slot.identity}"
            self.figures.kills += 1
            if fault == "crashloop":
                await asyncio.sleep(self.rng.uniform(0.3, 1.5))  # on purpose: while it starts
                slot.kill()
                began = slot.start()
                what += " twice (the second time while it started)"
                self.figures.kills += 1
                self.figures.crashloops += 1
        else:
            restarting = asyncio.ensure_future(asyncio.to_thread(restart_service, fault))
            await asyncio.sleep(self.rng.uniform(0.2, 1.0))  # on purpose: while it goes down
            slot = self.rng.choice(self.slots)
            slot.kill()  # and a process dies meanwhile: it restarts while the service is down
            slot.start()
            self.figures.kills += 1
            self.figures.kills_in_outages += 1
            self.figures.restarts[fault] = await restarting
            began = time.monotonic()
            what = (
                f"{fault} restarted in {self.figures.restarts[fault]:.1f}s "
                f"(SIGKILL {slot.identity} meanwhile)"
            )
        found = markers(index, PARTITIONS, datetime.now(UTC))
        self.figures.markers += len(found)
        for audit in found:
            audit.seed(self.sim.sim)
        await append_retrying(log, [e for a in found for e in a.opening(self.rng)])
        self.published += found
        recovered = await self.recovery(fault, began, found)
        self.figures.recoveries.append(recovered)
        print(
            f"chaos: fault {index + 1}: {what}; {len(self.published)} audits published; "
            f"projected after {recovered.projected:.1f}s, decided after {recovered.decided:.1f}s",
            flush=True,
        )

    async def recovery(self, fault: str, began: float, found: list[Audit]) -> Recovery:
        ids = [a.audit_id for a in found]
        projected: float | None = None
        deadline = began + RECOVERY_WAIT
        while time.monotonic() < deadline:
            self.restart_crashed()
            with contextlib.suppress(AssertionError):
                got = await statuses(self.backend.database_url, ids)
                if projected is None and len(got) == len(ids):
                    projected = time.monotonic() - began
                if len(got) == len(ids) and set(got.values()) == {"failed"}:
                    return Recovery(fault, projected or 0.0, time.monotonic() - began)
            await asyncio.sleep(0.2)
        self.figures.notes.append(
            f"no recovery within {RECOVERY_WAIT:g}s after {fault} (markers {ids[0]}…)"
        )
        return Recovery(fault, projected if projected is not None else RECOVERY_WAIT, RECOVERY_WAIT)

    def restart_crashed(self) -> None:
        """A serve process that ended on its own is a crash: noted, and started again."""
        for slot in self.slots:
            code = slot.exited()
            if code is not None:
                self.figures.crashes.append(f"{slot.identity} exit {code}")
                self.figures.notes.append(f"{slot.identity} ended on its own:\n{slot.tail(15)}")
                slot.start()

    async def settle(self, capture: CaptureServer) -> None:
        """Until every audit has its planned outcome, then until PostHog has an event for
        every planned failure."""

        async def unsettled() -> list[str]:
            self.restart_crashed()
            try:
                rows = await table(self.backend.database_url)
            except Exception as exc:
                raise AssertionError(f"table unreadable: {exc}") from exc
            return [
                a.audit_id
                for a in self.published
                if (r := rows.get(a.audit_id)) is None or not a.expected.met_by(r.state)
            ]

        try:
            await eventually(
                unsettled,
                until=lambda bad: not bad,
                timeout=120 + 0.05 * len(self.published),
                interval=1.0,
                message="every audit to reach its planned outcome",
            )
            self.figures.settled = True
        except AssertionError as exc:
            self.figures.notes.append(str(exc)[:500])
            return
        failures = sum(1 for a in self.published if a.expected.decided)
        with contextlib.suppress(AssertionError):
            await eventually(
                lambda: len({e.get("uuid") for e in capture.delivered()}),
                until=lambda n: n >= failures,
                timeout=120,
                interval=0.5,
                message="PostHog to have an event for every failure",
            )

    def stop(self) -> None:
        self.figures.stop_codes = [slot.stop() for slot in self.slots]


async def delete_topics(backend: Backend) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=backend.event_log_url.removeprefix("kafka://"))
    try:
        with contextlib.suppress(Exception):  # cleaning up: never the verdict
            await admin.start()
            await admin.delete_topics(list(Topics(backend.topic_prefix).all()))
    finally:
        await admin.close()


@contextlib.contextmanager
def capture_server() -> Iterator[CaptureServer]:
    server = CaptureServer().start()
    try:
        yield server
    finally:
        server.stop()


def rebuild(backend: Backend, env: dict[str, str]) -> dict[str, AuditRow]:
    """The rows of ``auditrec rebuild`` of the log into a fresh database."""
    with kafka_and_postgres(f"{backend.topic_prefix}r") as fresh:
        run_cli({**env, "AUDITREC_DATABASE_URL": fresh.database_url}, "rebuild", "--yes")
        return asyncio.run(table(fresh.database_url))


def chaos(
    profile: Profile,
    backend: Backend,
    sim: SimulatorServer,
    capture: CaptureServer,
    figures: Figures,
    log_dir: Path,
) -> None:
    """The run, then the verdict into ``figures``."""
    began = time.monotonic()
    env = backend.environ(
        **SERVE_SETTINGS,
        AUDITREC_CLOUDFLARE_API_URL=sim.url,
        AUDITREC_POSTHOG_HOST=capture.url,
    )
    run = Run(profile, backend, env, sim, log_dir, figures)
    run_cli(env, "init")

    async def faults_then_settle() -> None:
        topics = Topics(backend.topic_prefix)
        settings = load_settings(
            event_log_url=backend.event_log_url, database_url=backend.database_url
        )
        async with open_event_log(backend.event_log_url, topics, settings=settings) as log:
            await run.main(log)
        started = time.monotonic()
        await run.settle(capture)
        figures.seconds["settle"] = time.monotonic() - started

    try:
        asyncio.run(faults_then_settle())
        figures.seconds["faults and settling"] = time.monotonic() - began
    finally:
        try:
            run.stop()
        finally:
            ensure_services_up()
    # A process that ticks while the other stops appends observations no projector applies
    # before both are down (a stopped static member keeps its partitions for a session):
    # they wait in the log; the projector of the next start applies them, as this one does.
    figures.lag_at_stop = asyncio.run(
        projector_lag(backend.event_log_url, backend.database_url, backend.topic_prefix)
    )
    run_cli(env, "serve", "--until-idle", "--only", "projector,reconciler")
    read = asyncio.run(read_log(backend.event_log_url, backend.database_url, backend.topic_prefix))
    rows = asyncio.run(table(backend.database_url))
    figures.dead_letters = read["dead_letters"]
    judge(figures, run.published, read["events"], rows, capture.delivered())
    rebuilt = rebuild(backend, env)
    figures.rebuild_differing = same_rows(rows, rebuilt)
    figures.rebuild_equal = not figures.rebuild_differing
    figures.details += differences(figures.rebuild_differing, rows, rebuilt, "rebuild")


@pytest.mark.timeout(PROFILE.timeout)
def test_two_serve_processes_under_kills_and_restarts_lose_nothing_and_decide_once(
    tmp_path: Path, chaos_summary: Callable[[str], None]
) -> None:
    profile = PROFILE
    kafka_bootstrap()  # unreachable: the test fails when services are required, else skips
    postgres_url()
    began = time.monotonic()
    skipped = [s for s in profile.restarts if not restartable(s)]
    for service in skipped:
        warnings.warn(
            f"{service} was not started by scripts/services.sh: it is not restarted",
            stacklevel=1,
        )
    prefix = f"x{uuid.uuid4().hex[:10]}"
    figures = Figures(restarts_skipped=skipped)
    try:
        with (
            SimulatorServer() as sim,
            capture_server() as capture,
            kafka_and_postgres(prefix, partitions=PARTITIONS) as backend,
        ):
            try:
                chaos(profile, backend, sim, capture, figures, tmp_path)
            finally:
                asyncio.run(delete_topics(backend))
    finally:
        figures.seconds["total"] = time.monotonic() - began
        if figures.details:
            (tmp_path / "details.txt").write_text("\n".join(figures.details) + "\n")
            figures.notes.append(f"what differs: {tmp_path / 'details.txt'}")
        figures.notes.append(f"serve logs in {tmp_path}")
        summary = figures.summary(
            f"{profile.audits} audits, {profile.kills} kills, restarts {list(profile.restarts)}, "
            f"seed {profile.seed}"
        )
        chaos_summary(summary)
        if profile.summary_file is not None:
            profile.summary_file.write_text(summary + "\n")
        (tmp_path / "summary.txt").write_text(summary + "\n")

    assert figures.crashes == [], summary
    assert figures.settled, summary
    assert figures.lost == [], summary
    assert figures.wrong == [], summary
    assert figures.max_decisions <= 1, summary
    assert figures.posthog_missing == [] and figures.posthog_unexpected == [], summary
    assert figures.posthog_distinct == figures.decisions, summary
    assert figures.rebuild_equal and figures.fold_equal, summary
    assert figures.duplicate_events == 0 and figures.dead_letters == 0, summary
    assert figures.stop_codes == [0, 0], summary
    assert figures.kills - figures.kills_in_outages == profile.kills, summary
    assert all(r.decided < RECOVERY_WAIT for r in figures.recoveries), summary
    if profile.long:  # a generous bound: the figure itself is the measurement
        assert p90(figures.kill_recoveries("decided")) <= 3 * RECOVERY_TARGET, summary
