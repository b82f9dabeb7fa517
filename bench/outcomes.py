"""Benchmark: how many outcome deliveries per second one process sustains to a local webhook
receiver, on both backend pairs.

Per backend pair (embedded SQLite; Kafka 127.0.0.1:9092 + PostgreSQL, with a topic prefix and
a database of its own): ``auditrec init`` registers one webhook endpoint (a receiver of the
Workflows simulator, signed), then ``--audits`` audits (default 10,000; ``--quick`` 1,000) are
appended straight to the log, an ``AuditStarted`` and an ``AuditCompleted`` each (twice as many
events; each audit makes one entry, ``audit.completed``). Then one ``auditrec serve --only
outcomes`` starts and delivers the backlog. Figures: deliveries per second from the first
delivery's arrival to the last's (the receiver's ``received_at``, every entry's id received),
the time from the start of ``serve`` to the first delivery, copies received more than once,
and the CPU seconds ``serve`` and the receiver spent meanwhile.

The receiver is the simulator's, in a process of its own (``auditrec simulate-workflows
--webhook NAME=SECRET``, read over ``GET /_sim/webhooks/NAME`` every 2 s) so that it competes
with ``serve`` for the CPU only as a receiver would; ``--receiver inproc`` runs it in this
process instead.

    .venv/bin/python bench/outcomes.py [--backend sqlite|kafka|both] [--quick]
        [--audits 10000] [--receiver process|inproc] [--kafka 127.0.0.1:9092]
        [--database-url postgresql://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from consumers.eventlog.codec import encode
from consumers.eventlog.factory import open_event_log
from consumers.eventlog.port import Topics
from consumers.runtime.settings import load_settings
from consumers.workflows.simulator.server import SimulatorServer
from statemachine.events import AuditCompleted, AuditEvent, AuditStarted

sys.path.insert(0, str(Path(__file__).parent))
from databases import fresh_database  # bench/databases.py
from detection import _delete_topics, free_port  # bench/detection.py

AUDITREC = str(Path(sys.executable).with_name("auditrec"))
RECEIVER = "bench"
SECRET = "whsec_" + base64.b64encode(b"bench-outcome-feed-secret-32byte").decode()
CHUNK = 1000  # events appended at once


def events_of(audits: int, run: str) -> list[AuditEvent]:
    """Each audit's ``AuditStarted`` then its ``AuditCompleted``."""
    at = datetime.now(UTC)
    out: list[AuditEvent] = []
    for i in range(audits):
        audit_id = f"{run}-{i}"
        envelope: dict[str, Any] = {"audit_id": audit_id, "occurred_at": at, "producer": "bench"}
        data = {"project_id": "p", "workflow_instance_id": f"wf-{audit_id}"}
        out.append(AuditStarted(event_id=uuid.uuid4(), data=data, **envelope))
        out.append(AuditCompleted(event_id=uuid.uuid4(), **envelope))
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- the receiver ----------------------------------------------------------------------------


class Receiver:
    """The simulator's webhook receiver: its URL, what it received, the CPU it spent."""

    url: str
    pid: int
    read: Callable[[], Any]

    async def deliveries(self) -> list[dict[str, Any]]:
        return list(await asyncio.to_thread(self.read))


@contextlib.asynccontextmanager
async def receiver(kind: str) -> AsyncIterator[Receiver]:
    r = Receiver()
    if kind == "inproc":
        async with SimulatorServer() as sim:
            sim.sim.add_webhook(RECEIVER, SECRET)
            r.url, r.pid = f"{sim.root_url}/_sim/webhooks/{RECEIVER}", os.getpid()
            r.read = lambda: sim.sim.webhooks.get(RECEIVER)["deliveries"]
            yield r
        return
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    command = [AUDITREC, "simulate-workflows", "--port", str(port)]
    proc = await asyncio.to_thread(
        subprocess.Popen,
        [*command, "--webhook", f"{RECEIVER}={SECRET}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with httpx.Client(base_url=root, timeout=60) as http:

            def read() -> Any:
                return http.get(f"/_sim/webhooks/{RECEIVER}").json()["deliveries"]

            deadline = time.monotonic() + 30
            while True:
                with contextlib.suppress(httpx.TransportError):
                    await asyncio.to_thread(read)
                    break
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("the simulator did not come up")
                await asyncio.sleep(0.1)
            r.url, r.pid, r.read = f"{root}/_sim/webhooks/{RECEIVER}", proc.pid, read
            yield r
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --- one pair --------------------------------------------------------------------------------


async def run(pair: str, args: argparse.Namespace) -> dict[str, Any]:
    prefix = f"benchout{uuid.uuid4().hex[:8]}"
    async with contextlib.AsyncExitStack() as stack:
        if pair == "sqlite":
            tmp = stack.enter_context(tempfile.TemporaryDirectory())
            log_url, db_url = f"sqlite:///{tmp}/events.db", f"sqlite:///{tmp}/audits.db"
        else:
            log_url = f"kafka://{args.kafka}"
            db_url = await stack.enter_async_context(fresh_database(args.database_url))
            stack.push_async_callback(_delete_topics, args.kafka, prefix)
        rec = await stack.enter_async_context(receiver(args.receiver))
        env = {k: v for k, v in os.environ.items() if not k.startswith("AUDITREC_")} | {
            "AUDITREC_EVENT_LOG_URL": log_url,
            "AUDITREC_DATABASE_URL": db_url,
            "AUDITREC_TOPIC_PREFIX": prefix,
            "AUDITREC_API_PORT": str(free_port()),
            "AUDITREC_WEBHOOK_URLS": rec.url,
            "AUDITREC_WEBHOOK_SECRET": SECRET,
            "AUDITREC_LOG_LEVEL": "warning",
        }
        init = await asyncio.to_thread(
            subprocess.run, [AUDITREC, "init"], env=env, capture_output=True, timeout=120
        )
        if init.returncode != 0:
            raise SystemExit(f"auditrec init failed: {init.stderr.decode()[-2000:]}")
        events = events_of(args.audits, prefix)
        settings = load_settings(event_log_url=log_url, database_url=db_url)
        log = open_event_log(
            log_url, Topics(prefix), **({"settings": settings} if pair != "sqlite" else {})
        )
        t0 = time.monotonic()
        async with log:
            topic = log.topics.lifecycle
            for i in range(0, len(events), CHUNK):
                await log.append([encode(topic, e) for e in events[i : i + CHUNK]])
        appended = time.monotonic() - t0
        print(f"[{pair}] {len(events):,} events appended in {appended:.1f} s", flush=True)
        out = stack.enter_context(tempfile.TemporaryFile("w+"))  # noqa: SIM115 (closed by the stack)
        rec_cpu = cpu_seconds(rec.pid)
        started = time.time()
        proc = await asyncio.to_thread(
            subprocess.Popen,
            [AUDITREC, "serve", "--only", "outcomes"],
            env=env,
            stdout=out,
            stderr=out,
        )
        try:
            deliveries = await wait_for_all(rec, proc, args.audits, out)
            serve_cpu = cpu_seconds(proc.pid)
            rec_cpu = cpu_seconds(rec.pid) - rec_cpu
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    arrived = sorted(
        datetime.fromisoformat(d["received_at"].replace("Z", "+00:00")).timestamp()
        for d in deliveries
        if d["status"] < 300
    )
    span = arrived[-1] - arrived[0]
    return {
        "deliveries": len(arrived),
        "unique": len({d["id"] for d in deliveries if d["status"] < 300}),
        "refused": sum(1 for d in deliveries if d["status"] >= 300),
        "span": span,
        "rate": (len(arrived) - 1) / span if span > 0 else float("nan"),
        "first_after": arrived[0] - started,
        "serve_cpu": serve_cpu,
        "receiver_cpu": rec_cpu,
        "appended": appended,
    }


async def wait_for_all(
    rec: Receiver, proc: subprocess.Popen[bytes], want: int, out: Any
) -> list[dict[str, Any]]:
    """Every entry's id received (accepted); the deliveries."""
    last, since = -1, time.monotonic()
    while True:
        await asyncio.sleep(2.0)
        if proc.poll() is not None:
            out.seek(0)
            raise SystemExit(f"serve exited: {out.read()[-3000:]}")
        deliveries = await rec.deliveries()
        ids = {d["id"] for d in deliveries if d["status"] < 300}
        if len(ids) >= want:
            return deliveries
        if len(deliveries) != last:
            last, since = len(deliveries), time.monotonic()
        elif time.monotonic() - since > 60:
            raise SystemExit(f"no delivery for 60 s: {len(ids)} of {want} received")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "kafka", "both"], default="both")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--audits", type=int, default=10_000)
    parser.add_argument("--receiver", choices=["process", "inproc"], default="process")
    parser.add_argument("--kafka", default="127.0.0.1:9092")
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    if args.quick:
        args.audits = 1000
    pairs = ["sqlite", "kafka"] if args.backend == "both" else [args.backend]
    for pair in pairs:
        load = os.getloadavg()[0]
        r = asyncio.run(run(pair, args))
        print(
            f"[{pair}] {r['rate']:,.0f} deliveries/s: {r['deliveries']:,} "
            f"({r['unique']:,} entries, {r['refused']} refused) in {r['span']:.1f} s, the first "
            f"{r['first_after']:.1f} s after serve started; CPU: serve {r['serve_cpu']:.1f} s, "
            f"receiver {r['receiver_cpu']:.1f} s ({args.receiver}); load average at start "
            f"{load:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
