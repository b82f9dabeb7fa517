"""Benchmark: how soon a workflow's death fails its audit, with the event subscription and with
the watchdog alone, on both backend pairs.

A real ``auditrec serve`` process (every component) per scenario and backend pair (embedded
SQLite; Kafka 127.0.0.1:9092 + PostgreSQL, with a topic prefix and a database of its own),
against the Workflows simulator in this process (its queue ``q``). Audits are published with
``POST /events``, each with its own simulator instance set ``running``; deaths are status
changes in the simulator (half ``errored`` with an error message, half ``terminated``). A death
is timed from the status change (the message's ``metadata.eventTimestamp`` is taken in the same
call) to the moment the audit's row reads ``failed``, polling the projection store directly
(one query every ``--poll`` seconds, default 25 ms; no API read, which could probe).

1. **subscriber**: ``--audits`` running audits (default 60), one death per second at a random
   moment of each second; p50 / p99 / max by kind, and Workflows API requests per detection
   (the simulator's count for those instances ÷ detections). Targets: p99 ≤ 5 s, ≤ 2 requests.
   The same ``serve`` delivers the outcome feed to one of the simulator's webhook receivers
   (signed) and to a second queue of its (``outcomes``, no subscription's, by the producer
   API): each death is also timed to its audit's ``audit.failed`` entry arriving at the
   receiver (its ``received_at``) and on that queue (the message's ``timestamp_ms``).
2. **watchdog alone**: the same without ``AUDITREC_CLOUDFLARE_QUEUE_ID``, the watchdog scaled
   down (``AUDITREC_STALE_RUNNING_AFTER=20s``, ``AUDITREC_WATCHDOG_INTERVAL=5s``: 45× and 60×
   below the defaults of 15 min and 5 min).
3. **drops and duplicates**: ``--fault-audits`` audits (default 5,000: a ``started`` and an
   ended message each, ≈ 10,000 messages), queue faults ``drop`` 0.1 and ``duplicate`` 0.1,
   deaths spread over 30 s, the watchdog scaled as in 2 and the budget as in 4. Deaths whose
   message was dropped must be found by the watchdog within its bound (stale after + interval
   + 5 s of processing, from the death); duplicates must change nothing: 0 audits with more
   than one ``AuditFailed`` in their history (read from the store).
4. **burst**: ``--burst`` deaths (default 5,000) at random moments within 60 s, the budget
   scaled down to ``AUDITREC_PROBE_BUDGET=1000`` per ``AUDITREC_PROBE_BUDGET_WINDOW=10s`` (30×
   the default rate: the confirmer's 700 of each window make 5,000 deaths 71 s here, 36 min at
   1,000 per 5 minutes): all failed, the simulator's busiest 10 s ≤ the budget, the queue's
   ``acked`` = ``published`` with nothing dead-lettered, and the time until the last failed.
   Runs in the same ``serve`` as 1, after it.

    .venv/bin/python bench/detection.py [--backend sqlite|kafka|both] [--quick]
        [--scenarios 1,2,3,4] [--audits 60] [--fault-audits 5000] [--burst 5000]
        [--kafka 127.0.0.1:9092] [--database-url postgresql://postgres@127.0.0.1:5432/postgres]

``--quick``: 20 audits over 20 s, 1,000 fault audits, a burst of 1,000. ``--scenarios``: which
to run (4 only with 1).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import random
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from consumers.workflows.simulator.server import SimulatorServer
from consumers.workflows.simulator.state import LISTING

sys.path.insert(0, str(Path(__file__).parent))
from databases import fresh_database  # bench/databases.py

AUDITREC = str(Path(sys.executable).with_name("auditrec"))
TOKEN = "bench-operator-token-0123456789"
QUEUE = "q"
OUTCOMES = "outcomes"  # the outcome feed's queue: no subscription feeds it
RECEIVER = "outcomes"  # the outcome feed's webhook receiver
SECRET = "whsec_" + base64.b64encode(b"bench-outcome-feed-secret-32byte").decode()
ERROR: dict[str, str | None] = {"name": "Error", "message": "Worker exceeded memory limit"}
STALE_AFTER, INTERVAL = 20.0, 5.0  # the scaled-down watchdog (defaults: 15 min, 5 min)
BUDGET, WINDOW = 1000, 10.0  # the scaled-down budget (default: 1,000 per 5 min)
WATCHDOG_ENV = {
    "AUDITREC_STALE_RUNNING_AFTER": f"{STALE_AFTER:g}s",
    "AUDITREC_WATCHDOG_INTERVAL": f"{INTERVAL:g}s",
}
PROCESSING = 5.0  # seconds of processing allowed on top of the watchdog's bound
DETECTION_P99 = 5.0
REQUESTS_PER_DETECTION = 2.0


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- the store, read directly ----------------------------------------------------------------


class Store:
    """The projection store of one ``serve``, read-only: failed rows and failures per audit."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._sqlite: sqlite3.Connection | None = None
        self._pg: asyncpg.Connection | None = None

    async def open(self) -> None:
        if self.url.startswith("sqlite:///"):
            path = self.url.removeprefix("sqlite:///")
            self._sqlite = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        else:
            self._pg = await asyncpg.connect(self.url)

    async def close(self) -> None:
        if self._sqlite is not None:
            self._sqlite.close()
        if self._pg is not None:
            await self._pg.close()

    async def rows(self, sql: str) -> list[tuple[Any, ...]]:
        if self._sqlite is not None:
            return self._sqlite.execute(sql).fetchall()
        assert self._pg is not None
        return [tuple(r) for r in await self._pg.fetch(sql)]

    async def failed(self) -> set[str]:
        return {
            r[0] for r in await self.rows("SELECT audit_id FROM audits WHERE status = 'failed'")
        }

    async def running(self) -> int:
        rows = await self.rows("SELECT count(*) FROM audits WHERE status = 'running'")
        return int(rows[0][0])

    async def reconciled_by(self) -> dict[str, str]:
        rows = await self.rows(
            "SELECT audit_id, coalesce(reconciled_by, '') FROM audits WHERE status = 'failed'"
        )
        return dict(rows)

    async def moments(self, prefix: str) -> dict[str, dict[str, float]]:
        """Per audit of ``prefix`` (epoch seconds): ``observed``, when its last observation
        occurred (the confirming GET's answer; an ``AuditFailed`` takes that same time), and
        ``written``, when the store wrote its row (``updated_at``)."""
        out: dict[str, dict[str, float]] = {}
        rows = await self.rows(
            "SELECT audit_id, occurred_at FROM audit_events WHERE audit_id LIKE "
            f"'{prefix}-%' AND type = 'WorkflowStatusObserved'"
        )
        for audit_id, at in rows:
            seen = out.setdefault(audit_id, {})
            seen["observed"] = max(seen.get("observed", 0.0), _epoch(at))
        rows = await self.rows(
            f"SELECT audit_id, updated_at FROM audits WHERE audit_id LIKE '{prefix}-%'"
        )
        for audit_id, at in rows:
            if at is not None:
                out.setdefault(audit_id, {})["written"] = _epoch(at)
        return out

    async def failures(self) -> dict[str, int]:
        rows = await self.rows(
            "SELECT audit_id, count(*) FROM audit_events WHERE type = 'AuditFailed' "
            "GROUP BY audit_id"
        )
        return {r[0]: int(r[1]) for r in rows}


def _epoch(at: datetime | int) -> float:
    """A timestamp of the store in epoch seconds (SQLite keeps microseconds since 1970)."""
    if isinstance(at, int):
        return at / 1e6
    when = at
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


# --- one serve -------------------------------------------------------------------------------


@dataclass
class Serve:
    url: str
    store: Store
    client: httpx.AsyncClient


@contextlib.asynccontextmanager
async def serving(
    pair: str, args: argparse.Namespace, sim: SimulatorServer, extra: dict[str, str]
) -> AsyncIterator[Serve]:
    prefix = f"benchdet{uuid.uuid4().hex[:8]}"
    async with contextlib.AsyncExitStack() as stack:
        if pair == "sqlite":
            tmp = stack.enter_context(tempfile.TemporaryDirectory())
            log_url, db_url = f"sqlite:///{tmp}/events.db", f"sqlite:///{tmp}/audits.db"
        else:
            log_url = f"kafka://{args.kafka}"
            db_url = await stack.enter_async_context(fresh_database(args.database_url))
            stack.push_async_callback(_delete_topics, args.kafka, prefix)
        port = free_port()
        env = (
            {k: v for k, v in os.environ.items() if not k.startswith("AUDITREC_")}
            | {
                "AUDITREC_EVENT_LOG_URL": log_url,
                "AUDITREC_DATABASE_URL": db_url,
                "AUDITREC_TOPIC_PREFIX": prefix,
                "AUDITREC_API_PORT": str(port),
                "AUDITREC_API_TOKENS": f"ops:{TOKEN}:operate",
                "AUDITREC_CLOUDFLARE_API_URL": sim.url,
                "AUDITREC_CLOUDFLARE_ACCOUNT_ID": "bench",
                "AUDITREC_LOG_LEVEL": "warning",
            }
            | extra
        )
        init = await asyncio.to_thread(
            subprocess.run, [AUDITREC, "init"], env=env, capture_output=True, timeout=120
        )
        if init.returncode != 0:
            raise SystemExit(f"auditrec init failed: {init.stderr.decode()[-2000:]}")
        log = stack.enter_context(tempfile.TemporaryFile("w+"))  # noqa: SIM115 (closed by the stack)
        proc = await asyncio.to_thread(
            subprocess.Popen, [AUDITREC, "serve"], env=env, stdout=log, stderr=log
        )
        try:
            base = f"http://127.0.0.1:{port}"
            client = await stack.enter_async_context(
                httpx.AsyncClient(
                    base_url=base, timeout=60, headers={"Authorization": f"Bearer {TOKEN}"}
                )
            )

            async def ready() -> bool:
                if proc.poll() is not None:
                    log.seek(0)
                    raise SystemExit(f"serve exited: {log.read()[-3000:]}")
                with contextlib.suppress(httpx.TransportError):
                    return (await client.get("/readyz")).status_code == 200
                return False

            await wait_until(ready, "serve to come up", 90)
            store = Store(db_url)
            await store.open()
            try:
                yield Serve(base, store, client)
            finally:
                await store.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def _delete_topics(kafka: str, prefix: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
    await admin.start()
    try:
        names = [t for t in await admin.list_topics() if t.startswith(prefix + ".")]
        with contextlib.suppress(Exception):
            await admin.delete_topics(names)
    finally:
        await admin.close()


async def wait_until(check: Callable[[], Awaitable[bool]], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


# --- one scenario ----------------------------------------------------------------------------


@dataclass
class Deaths:
    """What happened to a set of audits: when each died, how, when its row read failed."""

    kind: dict[str, str] = field(default_factory=dict)  # audit → errored | terminated
    died: dict[str, float] = field(default_factory=dict)  # audit → wall clock
    found: dict[str, float] = field(default_factory=dict)
    dropped: set[str] = field(default_factory=set)
    webhook: dict[str, float] = field(default_factory=dict)  # audit → its audit.failed arrived
    queued: dict[str, float] = field(default_factory=dict)  # audit → its audit.failed sent
    last_failed_after: float = 0.0  # seconds from the first death to the last failed row
    requests: int = 0

    def times(self, kind: str | None = None, among: set[str] | None = None) -> list[float]:
        return sorted(
            self.found[a] - self.died[a]
            for a in self.found
            if (kind is None or self.kind[a] == kind) and (among is None or a in among)
        )

    def since_death(self, arrived: dict[str, float]) -> list[float]:
        return sorted(at - self.died[a] for a, at in arrived.items() if a in self.died)


async def start_audits(serve: Serve, sim: SimulatorServer, ids: list[str]) -> None:
    """Each audit's instance set ``running`` (publishing ``started``), then its
    ``AuditStarted``; returns once the projection holds them all running."""
    for a in ids:
        sim.sim.set_instance(f"wf-{a}", "running")
    at = datetime.now(UTC).isoformat()
    for i in range(0, len(ids), 200):
        events = [
            {
                "type": "AuditStarted",
                "audit_id": a,
                "producer": "bench",
                "occurred_at": at,
                "data": {"project_id": "p", "workflow_instance_id": f"wf-{a}"},
            }
            for a in ids[i : i + 200]
        ]
        r = await serve.client.post("/events", json=events)
        assert r.status_code == 202, r.text
    await wait_until(lambda: _all_known(serve, ids), "the audits in the table", 120)


async def _all_known(serve: Serve, ids: list[str]) -> bool:
    prefix = ids[0].rsplit("-", 1)[0]
    rows = await serve.store.rows(f"SELECT count(*) FROM audits WHERE audit_id LIKE '{prefix}-%'")
    return int(rows[0][0]) >= len(ids)


def _dropped_count(sim: SimulatorServer) -> int:
    """The queue's ``dropped`` count, without building its whole stats (O(messages))."""
    queues = sim.sim.queues
    with queues._lock:  # a benchmark's look inside the simulator
        q = queues._queues.get(QUEUE)
        return 0 if q is None else int(q.counts["dropped"])


async def run_deaths(
    serve: Serve,
    sim: SimulatorServer,
    ids: list[str],
    moments: list[float],
    *,
    poll: float,
    timeout: float,
    rng: random.Random,
) -> Deaths:
    """Kill ``ids`` at ``moments`` (seconds from now) and time each until its row is failed."""
    out = Deaths()
    kinds = ["errored", "terminated"] * (len(ids) // 2 + 1)
    rng.shuffle(kinds)
    out.kind = dict(zip(ids, kinds, strict=False))
    pending = set(ids)
    done = asyncio.Event()

    async def watch() -> None:
        while pending:
            failed = await serve.store.failed()
            now = time.time()
            for a in list(pending):
                if a in failed and a in out.died:
                    out.found[a] = now
                    pending.discard(a)
            if not pending:
                break
            await asyncio.sleep(poll)
        done.set()

    watcher = asyncio.create_task(watch())
    t0 = time.monotonic()
    for a, moment in sorted(zip(ids, moments, strict=True), key=lambda p: p[1]):
        wait = t0 + moment - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        dropped = _dropped_count(sim)
        out.died[a] = time.time()
        if out.kind[a] == "errored":
            sim.sim.set_instance(f"wf-{a}", "errored", error=ERROR)
        else:
            sim.sim.set_instance(f"wf-{a}", "terminated")
        if _dropped_count(sim) > dropped:
            out.dropped.add(a)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), timeout)
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    if out.found:
        out.last_failed_after = max(out.found.values()) - min(out.died.values())
    out.requests = sum(sim.sim.requests_for(f"wf-{a}") for a in ids)
    return out


def failed_entries(sim: SimulatorServer) -> tuple[dict[str, float], dict[str, float]]:
    """Per audit, when its first ``audit.failed`` entry arrived at the webhook receiver
    (accepted) and when it was sent to the outcome queue (epoch seconds)."""
    webhook: dict[str, float] = {}
    for d in sim.sim.webhooks.get(RECEIVER)["deliveries"]:
        body = d["body"] or {}
        if d["status"] < 300 and body.get("type") == "audit.failed":
            at = datetime.fromisoformat(d["received_at"].replace("Z", "+00:00")).timestamp()
            webhook.setdefault(body["audit_id"], at)
    queued: dict[str, float] = {}
    for m in sim.sim.queue_stats(OUTCOMES)["messages"]:
        body = json.loads(m["body"])
        if body.get("type") == "audit.failed":
            queued.setdefault(body["audit_id"], m["timestamp_ms"] / 1000)
    return webhook, queued


async def outcomes_of(sim: SimulatorServer, deaths: Deaths, timeout: float) -> None:
    """Wait (up to ``timeout``) for the ``audit.failed`` entry of every audit found failed at
    the receiver and on the queue; note when each arrived."""

    async def arrived() -> bool:
        deaths.webhook, deaths.queued = failed_entries(sim)
        return set(deaths.found) <= set(deaths.webhook) & set(deaths.queued)

    with contextlib.suppress(SystemExit):  # what is missing shows in the report
        await wait_until(arrived, "the outcome entries", timeout)
    deaths.webhook, deaths.queued = failed_entries(sim)
    died = set(deaths.died)
    deaths.webhook = {a: t for a, t in deaths.webhook.items() if a in died}
    deaths.queued = {a: t for a, t in deaths.queued.items() if a in died}


class Arrivals:
    """When each Workflows API request (an instance's GET or PATCH, a listing page) reached the
    simulator, apart from the queue's pulls and acknowledgements, which the simulator counts
    with them and which spend no budget: its ``arrive`` hook, wrapped."""

    def __init__(self, sim: SimulatorServer) -> None:
        self.api: list[float] = []
        self.queue: list[float] = []
        self.listings = 0  # of the API calls: listing pages
        original = sim.sim.arrive

        def arrive(instance_id: str | None) -> Any:
            (self.queue if instance_id is None else self.api).append(time.monotonic())
            self.listings += instance_id == LISTING
            return original(instance_id)

        sim.sim.arrive = arrive  # type: ignore[method-assign]

    def clear(self) -> None:
        self.api.clear()
        self.queue.clear()
        self.listings = 0

    @staticmethod
    def busiest(times: list[float], seconds: float) -> int:
        most, start = 0, 0
        for end, at in enumerate(times):
            while times[start] <= at - seconds:
                start += 1
            most = max(most, end - start + 1)
        return most


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def spread(values: list[float]) -> str:
    if not values:
        return "—"
    return f"{pct(values, 50):.2f} / {pct(values, 99):.2f} / {values[-1]:.2f} s"


def every_second(n: int, rng: random.Random) -> list[float]:
    return [i + rng.random() for i in range(n)]


# --- the scenarios ---------------------------------------------------------------------------


async def scenarios(pair: str, args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    res: dict[str, Any] = {}
    async with SimulatorServer() as sim:
        arrivals = Arrivals(sim)
        sub_env = {
            "AUDITREC_CLOUDFLARE_QUEUE_ID": QUEUE,
            "AUDITREC_PROBE_BUDGET": str(BUDGET),
            "AUDITREC_PROBE_BUDGET_WINDOW": f"{WINDOW:g}s",
        }
        # 1 + 4: the subscriber, watchdog at its defaults, budget scaled down; the outcome feed
        # to a webhook receiver and a queue
        sim.sim.reset()
        sim.sim.add_queue(QUEUE)
        sim.sim.add_queue(OUTCOMES, workflows=[])
        sim.sim.add_webhook(RECEIVER, SECRET)
        feed_env = {
            "AUDITREC_WEBHOOK_URLS": f"{sim.root_url}/_sim/webhooks/{RECEIVER}",
            "AUDITREC_WEBHOOK_SECRET": SECRET,
            "AUDITREC_OUTCOME_QUEUE_ID": OUTCOMES,
        }
        if "1" in args.scenarios:
            async with serving(pair, args, sim, sub_env | feed_env) as serve:
                ids = [f"sub-{i}" for i in range(args.audits)]
                await start_audits(serve, sim, ids)
                await asyncio.sleep(1.0)  # the started messages pulled (observations)
                print(f"[{pair}] 1. subscriber: {len(ids)} deaths over {len(ids)} s", flush=True)
                res["subscriber"] = await run_deaths(
                    serve, sim, ids, every_second(len(ids), rng),
                    poll=args.poll, timeout=60, rng=rng,
                )  # fmt: skip
                res["sub_moments"] = await serve.store.moments("sub")
                await outcomes_of(sim, res["subscriber"], 30)
                if "4" in args.scenarios:
                    res |= await burst(pair, args, serve, sim, arrivals, rng)
        if "2" in args.scenarios:
            # 2: the watchdog alone, scaled down
            sim.sim.reset()
            async with serving(pair, args, sim, WATCHDOG_ENV) as serve:
                ids = [f"wd-{i}" for i in range(args.audits)]
                await start_audits(serve, sim, ids)
                print(f"[{pair}] 2. watchdog alone: {len(ids)} deaths over {len(ids)} s",
                      flush=True)  # fmt: skip
                res["watchdog"] = await run_deaths(
                    serve, sim, ids, every_second(len(ids), rng),
                    poll=args.poll, timeout=120, rng=rng,
                )  # fmt: skip
        if "3" in args.scenarios:
            # 3: drops and duplicates, subscriber + scaled watchdog + scaled budget
            sim.sim.reset()
            sim.sim.add_queue(QUEUE, drop=0.1, duplicate=0.1, seed=args.seed)
            async with serving(pair, args, sim, sub_env | WATCHDOG_ENV) as serve:
                ids = [f"fault-{i}" for i in range(args.fault_audits)]
                await start_audits(serve, sim, ids)
                print(f"[{pair}] 3. faults: {len(ids)} deaths over 30 s", flush=True)
                moments = [rng.uniform(0, 30) for _ in ids]
                faults = await run_deaths(
                    serve, sim, ids, moments, poll=max(args.poll, 0.1), timeout=300, rng=rng
                )
                await asyncio.sleep(3.0)  # duplicates still in flight have their chance
                stats = sim.sim.queue_stats(QUEUE)
                res["faults"] = faults
                res["faults_queue"] = {
                    k: stats[k] for k in ("published", "duplicated", "dropped", "acked")
                }
                res["failures"] = await serve.store.failures()
                res["fault_by"] = await serve.store.reconciled_by()
    return res


async def burst(
    pair: str,
    args: argparse.Namespace,
    serve: Serve,
    sim: SimulatorServer,
    arrivals: Arrivals,
    rng: random.Random,
) -> dict[str, Any]:
    """4: the burst, in the serve of 1, after it."""
    ids = [f"burst-{i}" for i in range(args.burst)]
    await start_audits(serve, sim, ids)
    print(f"[{pair}] 4. burst: {len(ids)} deaths within 60 s", flush=True)
    moments = [rng.uniform(0, 60) for _ in ids]
    await asyncio.sleep(2.0)
    arrivals.clear()
    deaths = await run_deaths(
        serve, sim, ids, moments, poll=max(args.poll, 0.2), timeout=600, rng=rng
    )
    await asyncio.sleep(2.0)  # the last acknowledgements
    stats = sim.sim.queue_stats(QUEUE)
    return {
        "burst": deaths,
        "burst_queue": {
            k: stats[k] for k in ("published", "acked", "dead_lettered", "visible", "leased")
        },
        "busiest_all": sim.sim.busiest_window(WINDOW),
        "busiest": arrivals.busiest(sorted(arrivals.api), WINDOW),
        "busiest_queue": arrivals.busiest(sorted(arrivals.queue), WINDOW),
        "burst_api": len(arrivals.api),
        "burst_listings": arrivals.listings,
        "burst_queue_requests": len(arrivals.queue),
        "total_requests": sim.sim.stats()["total"],
    }


# --- the report ------------------------------------------------------------------------------

Row = tuple[str, str, str, bool | None]  # what, figure, target, met


def report(res: dict[str, Any]) -> list[Row]:
    """The rows of one backend pair (of the scenarios run)."""
    rows: list[Row] = []
    if "subscriber" in res:
        rows += report_subscriber(res)
    if "watchdog" in res:
        rows += report_watchdog(res)
    if "faults" in res:
        rows += report_faults(res)
    if "burst" in res:
        rows += report_burst(res)
    return rows


def report_subscriber(res: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    sub: Deaths = res["subscriber"]
    p99 = pct(sub.times(), 99)
    rows.append(("1 subscriber: failed / deaths", f"{len(sub.found)} / {len(sub.died)}", "all",
                 len(sub.found) == len(sub.died)))  # fmt: skip
    for kind in ("errored", "terminated"):
        rows.append((f"1 subscriber {kind} p50/p99/max", spread(sub.times(kind)), "", None))
    rows.append(("1 subscriber p99 (all)", f"{p99:.2f} s", f"≤ {DETECTION_P99:g} s",
                 p99 <= DETECTION_P99))  # fmt: skip
    per = sub.requests / max(len(sub.found), 1)
    rows.append(("1 API requests per detection", f"{per:.2f} ({sub.requests}/{len(sub.found)})",
                 f"≤ {REQUESTS_PER_DETECTION:g}", per <= REQUESTS_PER_DETECTION))  # fmt: skip
    legs = stages(sub, res["sub_moments"])
    rows.append(("1 death → observed (pull + confirm GET)", spread(legs[0]), "", None))
    rows.append(("1 observed → row written", spread(legs[1]), "", None))
    rows.append(("1 row written → seen by the poll", spread(legs[2]), "", None))
    rows.append(("1 audit.failed at webhook / on queue",
                 f"{len(sub.webhook)} / {len(sub.queued)} of {len(sub.died)}", "all",
                 len(sub.webhook) == len(sub.queued) == len(sub.died)))  # fmt: skip
    rows.append(("1 death → webhook p50/p99/max", spread(sub.since_death(sub.webhook)), "", None))
    rows.append(("1 death → outcome queue p50/p99/max", spread(sub.since_death(sub.queued)),
                 "", None))  # fmt: skip
    return rows


def report_watchdog(res: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    wd: Deaths = res["watchdog"]
    rows.append(("2 watchdog: failed / deaths", f"{len(wd.found)} / {len(wd.died)}", "", None))
    for kind in ("errored", "terminated"):
        rows.append((f"2 watchdog {kind} p50/p99/max", spread(wd.times(kind)), "", None))
    rows.append(("2 watchdog p50/p99 (all)", spread(wd.times()),
                 f"scaled {STALE_AFTER:g} s + {INTERVAL:g} s", None))  # fmt: skip
    return rows


def report_faults(res: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    fl: Deaths = res["faults"]
    q = res["faults_queue"]
    rows.append(("3 faults: failed / deaths", f"{len(fl.found)} / {len(fl.died)}", "all",
                 len(fl.found) == len(fl.died)))  # fmt: skip
    rows.append(("3 published/duplicated/dropped/acked",
                 f"{q['published']}/{q['duplicated']}/{q['dropped']}/{q['acked']}", "", None))  # fmt: skip
    bound = STALE_AFTER + INTERVAL + PROCESSING
    dropped = fl.times(among=fl.dropped)
    found = [a for a in fl.dropped if a in fl.found]
    by = res["fault_by"]
    by_wd = sum(1 for a in fl.dropped if by.get(a) not in (None, "subscription"))
    rows.append(("3 dropped deaths p50/p99/max", spread(dropped), f"≤ {bound:g} s, all",
                 len(found) == len(fl.dropped) and (not dropped or dropped[-1] <= bound)))  # fmt: skip
    rows.append(("3 dropped: failed / not by subscription",
                 f"{len(found)} / {by_wd} of {len(fl.dropped)}", "", None))  # fmt: skip
    rows.append(("3 not dropped p50/p99/max",
                 spread(fl.times(among=set(fl.died) - fl.dropped)), "", None))  # fmt: skip
    extra = sum(n - 1 for a, n in res["failures"].items() if n > 1 and a.startswith("fault-"))
    rows.append(("3 extra decisions (AuditFailed > 1)",
                 f"{extra} ({q['published']:,} messages)", "0", extra == 0))  # fmt: skip
    return rows


def report_burst(res: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    bu: Deaths = res["burst"]
    bq = res["burst_queue"]
    rows.append(("4 burst: failed / deaths", f"{len(bu.found)} / {len(bu.died)}", "all",
                 len(bu.found) == len(bu.died)))  # fmt: skip
    rows.append((f"4 busiest {WINDOW:g} s: API calls", f"{res['busiest']} ({res['burst_api']}, {res['burst_listings']} listing)",
                 f"≤ {BUDGET}", res["busiest"] <= BUDGET))  # fmt: skip
    rows.append((f"4 busiest {WINDOW:g} s: pulls + acks", f"{res['busiest_queue']} ({res['burst_queue_requests']} in all)",
                 "no budget", None))  # fmt: skip
    rows.append((f"4 busiest {WINDOW:g} s: simulator, all", f"{res['busiest_all']}", "", None))
    lost = bq["published"] != bq["acked"] or bq["dead_lettered"] != 0
    rows.append(("4 queue published/acked/dead-lettered",
                 f"{bq['published']}/{bq['acked']}/{bq['dead_lettered']}", "acked = published, 0",
                 not lost))  # fmt: skip
    floor = len(bu.died) / (BUDGET * 0.7 / WINDOW)
    rows.append(("4 first death → last failed", f"{bu.last_failed_after:.1f} s",
                 f"≥ {floor:.0f} s (700/{WINDOW:g} s)", None))  # fmt: skip
    rows.append(("4 burst p50/p99/max", spread(bu.times()), "", None))
    return rows


def stages(deaths: Deaths, moments: dict[str, dict[str, float]]) -> list[list[float]]:
    """Where each detection's time went: death → the confirming observation (the pull's wait,
    the subscriber, the confirmer, its GET), → the failed row written (reconciler, projector),
    → the row seen by the poll."""
    legs: list[list[float]] = [[], [], []]
    for a, found in deaths.found.items():
        m = moments.get(a, {})
        if "observed" in m and "written" in m:
            legs[0].append(m["observed"] - deaths.died[a])
            legs[1].append(m["written"] - m["observed"])
            legs[2].append(found - m["written"])
    return [sorted(leg) for leg in legs]


def table(tables: dict[str, list[Row]]) -> None:
    names = {"sqlite": "sqlite (embedded)", "kafka": "kafka + postgresql"}
    pairs = list(tables)
    width = 30
    print()
    print(f"{'':42}" + "".join(f"{names[p]:{width}}" for p in pairs) + "target")
    for i, (what, _, target, _) in enumerate(tables[pairs[0]]):
        cells = ""
        verdicts = []
        for p in pairs:
            _, figure, _, ok = tables[p][i]
            cells += f"{figure:{width - 1}} "
            if ok is not None:
                verdicts.append(f"{'met' if ok else 'missed'}")
        mark = f" {'/'.join(verdicts)}" if verdicts else ""
        print(f"{what:42}{cells}{target}{mark}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "kafka", "both"], default="both")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--scenarios", default="1,2,3,4", help="which to run (4 only with 1)")
    parser.add_argument("--audits", type=int, default=60)
    parser.add_argument("--fault-audits", type=int, default=5000)
    parser.add_argument("--burst", type=int, default=5000)
    parser.add_argument("--poll", type=float, default=0.025)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--kafka", default="127.0.0.1:9092")
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    args.scenarios = set(args.scenarios.replace(",", ""))
    if not args.scenarios <= set("1234") or not args.scenarios:
        parser.error("--scenarios: a list of 1, 2, 3 and 4, such as 1,4")
    if args.quick:
        args.audits, args.fault_audits, args.burst = 20, 1000, 1000
    pairs = ["sqlite", "kafka"] if args.backend == "both" else [args.backend]
    tables: dict[str, list[Row]] = {}
    for pair in pairs:
        load = os.getloadavg()[0]
        t0 = time.monotonic()
        res = asyncio.run(scenarios(pair, args))
        tables[pair] = report(res)
        took = time.monotonic() - t0
        print(f"[{pair}] done in {took:.0f} s (load average at start {load:.2f}, "
              f"at end {os.getloadavg()[0]:.2f})", flush=True)  # fmt: skip
    table(tables)


if __name__ == "__main__":
    main()
