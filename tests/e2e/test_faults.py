"""Faults with real processes: SIGKILL the projector and the reconciler at random points of a
stream of thousands of events, two reconcilers in one group, a broker restart mid-stream.

After each run the log is read back whole and checked against the pure core: every audit that
must fail has exactly one reconciler decision in the log, nothing else has one, and the
``audits`` table equals the pure fold of the log.
"""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from consumers.eventlog.codec import decode, encode
from consumers.eventlog.factory import open_event_log
from consumers.eventlog.port import EventLog, OutRecord, Topics
from consumers.runtime.settings import load_settings
from projections.factory import open_store
from projections.row import AuditRow, project
from statemachine.errors import EventLogError
from statemachine.events import EVENT_ADAPTER, AuditEvent
from tests.conftest import BACKEND_PAIRS, Backend, backend_pair, kafka_and_postgres
from tests.eventually import eventually, eventually_sync

AUDITREC = str(Path(sys.executable).with_name("auditrec"))
ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow]


@pytest.fixture(params=BACKEND_PAIRS)
def fault_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with backend_pair(request.param, tmp_path, f"f{uuid.uuid4().hex[:10]}", partitions=6) as pair:
        yield pair


def init(env: dict[str, str]) -> None:
    done = subprocess.run([AUDITREC, "init"], env=env, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-2000:]


def _event(
    kind: str, audit_id: str, at: datetime, data: dict[str, Any], producer: str = "crawler"
) -> AuditEvent:
    return EVENT_ADAPTER.validate_python(
        {
            "event_id": str(uuid.uuid4()),
            "type": kind,
            "audit_id": audit_id,
            "occurred_at": at,
            "producer": producer,
            "data": data,
        }
    )


def stream(audits: int, seed: int = 7) -> tuple[list[AuditEvent], set[str]]:
    """Events for ``audits`` audits, interleaved; and the audits that must fail.

    A third errors (observed errored twice: still one decision), a third is healthy, a third
    completes. Observations are published directly, as the probe would append them.
    """
    rng = random.Random(seed)
    t0 = datetime(2026, 11, 30, 6, tzinfo=UTC)
    per_audit: list[list[AuditEvent]] = []
    must_fail = set()
    for i in range(audits):
        a = f"a-{i:05d}"
        wf = f"wf-{i:05d}"
        evs = [
            _event(
                "AuditStarted",
                a,
                t0,
                {"project_id": "p", "workflow_instance_id": wf, "started_by_user_id": "u"},
            ),
            _event(
                "AuditProgressed",
                a,
                t0 + timedelta(minutes=1),
                {"current_phase": "crawl", "pages_crawled": i % 50},
            ),
        ]
        obs_at = t0 + timedelta(minutes=30)
        if i % 3 == 0:
            must_fail.add(a)
            for k in range(2):
                evs.append(
                    _event(
                        "WorkflowStatusObserved",
                        a,
                        obs_at + timedelta(seconds=k),
                        {
                            "workflow_instance_id": wf,
                            "status": "errored",
                            "trigger": "watchdog",
                            "error": {"name": "Error", "message": "Worker exceeded memory limit"},
                            "observed_at": (obs_at + timedelta(seconds=k)).isoformat(),
                        },
                        "auditrec-probe",
                    )
                )
        elif i % 3 == 1:
            evs.append(
                _event(
                    "WorkflowStatusObserved",
                    a,
                    obs_at,
                    {
                        "workflow_instance_id": wf,
                        "status": "running",
                        "trigger": "watchdog",
                        "observed_at": obs_at.isoformat(),
                    },
                    "auditrec-probe",
                )
            )
        else:
            evs.append(_event("AuditCompleted", a, obs_at, {"pages_crawled": 50}))
        per_audit.append(evs)
    # interleave the audits' events, keeping each audit's order
    out: list[AuditEvent] = []
    cursors = [0] * audits
    live = list(range(audits))
    while live:
        j = rng.choice(live)
        out.append(per_audit[j][cursors[j]])
        cursors[j] += 1
        if cursors[j] == len(per_audit[j]):
            live.remove(j)
    return out, must_fail


class Proc:
    def __init__(self, env: dict[str, str], only: str, log_path: Path) -> None:
        self.env, self.only, self.log_path = env, only, log_path
        self.p: subprocess.Popen[bytes] | None = None
        self.kills = 0

    def start(self) -> None:
        log = self.log_path.open("ab")
        self.p = subprocess.Popen(
            [AUDITREC, "serve", "--only", self.only],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()

    def kill(self) -> None:
        assert self.p is not None
        self.p.send_signal(signal.SIGKILL)
        self.p.wait(10)
        self.kills += 1

    def stop(self) -> int:
        if self.p is None:
            return 0
        self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            raise


async def publish(log: EventLog, events: list[AuditEvent], chunk: int, pause: float) -> None:
    topic = log.topics.lifecycle
    for i in range(0, len(events), chunk):
        await append_retrying(log, [encode(topic, e) for e in events[i : i + chunk]])
        await asyncio.sleep(pause)  # on purpose: a stream, so that faults land mid-way


async def append_retrying(log: EventLog, records: list[OutRecord]) -> None:
    """Append, retrying retriable failures (a broker restarting) for up to a minute."""

    async def appended() -> bool:
        try:
            await log.append(records)
        except EventLogError as exc:
            if not exc.retriable:
                raise
            raise AssertionError(f"append refused: {exc}") from exc
        return True

    await eventually(appended, timeout=60, interval=0.5, message="the records to be appended")


async def read_log(backend: Backend) -> list[AuditEvent]:
    topics = Topics(backend.topic_prefix)
    settings = load_settings(event_log_url=backend.event_log_url, database_url=backend.database_url)
    log = open_event_log(
        backend.event_log_url,
        topics,
        **({"settings": settings} if backend.name != "sqlite" else {}),
    )
    out: list[AuditEvent] = []
    async with log:
        for p in await log.inspection.partitions(topics.lifecycle):
            async for batch in log.inspection.read(topics.lifecycle, p, 0, None):
                out.extend(decode(r.value) for r in batch)
    return out


async def projection(backend: Backend) -> dict[str, AuditRow]:
    async with open_store(backend.database_url) as store:
        return {row.audit_id: row async for row in store.audits.iter_rows()}


async def projected(backend: Backend) -> Counter[str]:
    """How many audits the projection holds per status."""
    async with open_store(backend.database_url) as store:
        return Counter(await store.audits.count_by_status())


def wait_caught_up(backend: Backend, audits: int, must_fail: set[str]) -> None:
    """Until the running processes have projected every audit and failed the dead ones."""
    eventually_sync(
        lambda: asyncio.run(projected(backend)),
        until=lambda n: n.total() == audits and n["failed"] == len(must_fail),
        timeout=120,
        interval=0.5,
        message=f"{audits} audits projected, {len(must_fail)} of them failed",
    )


def pure_fold(events: list[AuditEvent]) -> dict[str, AuditRow]:
    rows: dict[str, AuditRow] = {}
    for e in events:
        rows[e.audit_id] = project(rows.get(e.audit_id), e)
    return {a: r for a, r in rows.items() if r.state.exists}


def same(a: AuditRow, b: AuditRow) -> bool:
    va, vb = a.values(), b.values()
    va.pop("updated_at"), vb.pop("updated_at")
    return va == vb


def check(backend: Backend, must_fail: set[str], audits: int) -> None:
    log = asyncio.run(read_log(backend))
    ids = Counter(e.event_id for e in log)
    dup = [i for i, n in ids.items() if n > 1]
    assert not dup, f"{len(dup)} events appear more than once in the log"
    decisions = Counter(
        e.audit_id
        for e in log
        if e.type == "AuditFailed" and e.data.failed_by.value == "reconciler"  # type: ignore[union-attr]
    )
    assert set(decisions) == must_fail
    assert set(decisions.values()) == {1}, "an audit was decided more than once"
    rows = asyncio.run(projection(backend))
    expected = pure_fold(log)
    assert len(rows) == audits == len(expected)
    bad = [a for a in expected if not same(rows[a], expected[a])]
    assert not bad, f"{len(bad)} rows differ from the pure fold, e.g. {bad[:3]}"
    assert {a for a, r in rows.items() if r.status == "failed"} == must_fail


def finish(env: dict[str, str], log_path: Path) -> None:
    with log_path.open("w") as out:
        done = subprocess.run(
            [AUDITREC, "serve", "--until-idle", "--only", "projector,reconciler"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=300,
        )
    assert done.returncode == 0, log_path.read_text()[-3000:]


def test_sigkill_of_projector_and_reconciler_loses_and_duplicates_nothing(
    fault_backend: Backend, tmp_path: Path
) -> None:
    audits = 1500
    events, must_fail = stream(audits)
    env = fault_backend.environ(AUDITREC_LOG_FORMAT="json")
    init(env)
    projector = Proc(env, "projector", tmp_path / "projector.log")
    reconciler = Proc(env, "reconciler", tmp_path / "reconciler.log")
    projector.start()
    reconciler.start()
    rng = random.Random(11)

    async def run() -> None:
        topics = Topics(fault_backend.topic_prefix)
        settings = load_settings(
            event_log_url=fault_backend.event_log_url, database_url=fault_backend.database_url
        )
        log = open_event_log(
            fault_backend.event_log_url,
            topics,
            **({"settings": settings} if fault_backend.name != "sqlite" else {}),
        )
        async with log:
            task = asyncio.create_task(publish(log, events, chunk=250, pause=0.3))
            victims = [reconciler, projector]
            while not task.done():
                await asyncio.sleep(rng.uniform(0.4, 1.5))  # on purpose: a random kill point
                victim = victims[(projector.kills + reconciler.kills) % 2]
                victim.kill()
                victim.start()
            await task

    try:
        asyncio.run(run())
        assert projector.kills + reconciler.kills >= 4
        time.sleep(rng.uniform(0.5, 1.5))  # on purpose: the last kills land mid-work, too
        projector.kill()
        reconciler.kill()
    finally:
        for p in (projector, reconciler):
            if p.p is not None and p.p.poll() is None:
                p.p.kill()
    finish(env, tmp_path / "finish.log")
    check(fault_backend, must_fail, audits)


@pytest.mark.kafka
@pytest.mark.postgres
def test_two_reconcilers_in_one_group_share_partitions_without_a_double_decision(
    tmp_path: Path,
) -> None:
    prefix = f"g{uuid.uuid4().hex[:10]}"
    with kafka_and_postgres(prefix, partitions=6) as backend:
        audits = 900
        events, must_fail = stream(audits, seed=3)
        env = backend.environ(AUDITREC_LOG_FORMAT="json")
        init(env)
        procs = [Proc(env, "reconciler", tmp_path / f"r{i}.log") for i in range(2)]
        projector = Proc(env, "projector", tmp_path / "p.log")
        for p in (*procs, projector):
            p.start()

        async def run() -> None:
            topics = Topics(prefix)
            settings = load_settings(
                event_log_url=backend.event_log_url, database_url=backend.database_url
            )
            async with open_event_log(backend.event_log_url, topics, settings=settings) as log:
                await publish(log, events, chunk=150, pause=0.4)

        def assigned() -> list[int]:
            return [
                sum(
                    1
                    for line in (tmp_path / f"r{i}.log").read_text().splitlines()
                    if '"partitions assigned"' in line and '"partitions": []' not in line
                )
                for i in range(2)
            ]

        try:
            asyncio.run(run())
            wait_caught_up(backend, audits, must_fail)
            eventually_sync(
                assigned,
                until=lambda counts: all(n > 0 for n in counts),
                timeout=30,
                interval=0.2,
                message="both reconcilers to own partitions",
            )
        finally:
            codes = [p.stop() for p in (*procs, projector)]
        assert codes == [0, 0, 0]
        finish(env, tmp_path / "finish.log")
        check(backend, must_fail, audits)


@pytest.mark.kafka
@pytest.mark.postgres
@pytest.mark.serial
@pytest.mark.parametrize("service", ["kafka", "postgres"])
def test_a_service_restart_mid_stream_loses_nothing(tmp_path: Path, service: str) -> None:
    """The broker, or the database, goes away mid-stream: the consumers retry with backoff
    and resume where they were."""
    status = subprocess.run(
        ["bash", str(ROOT / "scripts/services.sh"), "status"], capture_output=True, text=True
    )
    line = next((ln for ln in status.stdout.splitlines() if ln.startswith(f"{service}:")), "")
    if "(ours" not in line:
        pytest.skip(
            f"{service} was not started by scripts/services.sh: it cannot be restarted here"
        )
    prefix = f"b{uuid.uuid4().hex[:10]}"
    with kafka_and_postgres(prefix, partitions=3) as backend:
        audits = 600
        events, must_fail = stream(audits, seed=5)
        env = backend.environ(AUDITREC_LOG_FORMAT="json")
        init(env)
        procs = [
            Proc(env, "projector", tmp_path / "p.log"),
            Proc(env, "reconciler", tmp_path / "r.log"),
        ]
        for p in procs:
            p.start()

        async def run() -> None:
            topics = Topics(prefix)
            settings = load_settings(
                event_log_url=backend.event_log_url, database_url=backend.database_url
            )
            async with open_event_log(backend.event_log_url, topics, settings=settings) as log:
                task = asyncio.create_task(publish(log, events, chunk=100, pause=0.25))
                # restart while the consumers are at work: once the projection has rows
                await eventually(
                    lambda: projected(backend),
                    until=lambda n: n.total() > 0,
                    timeout=60,
                    interval=0.1,
                    message="the projector to apply the first events",
                )
                restart = await asyncio.create_subprocess_exec(
                    "bash",
                    str(ROOT / "scripts/services.sh"),
                    f"{service}-restart",
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.PIPE,
                )
                _, err = await restart.communicate()
                assert restart.returncode == 0, err.decode()[-2000:]
                await task

        try:
            asyncio.run(run())
            wait_caught_up(backend, audits, must_fail)  # the running consumers resumed
        finally:
            codes = [p.stop() for p in procs]
        assert codes == [0, 0]
        finish(env, tmp_path / "finish.log")
        check(backend, must_fail, audits)
