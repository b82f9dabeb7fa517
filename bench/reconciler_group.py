"""Benchmark: the reconciler scaled out — one process, then two processes in one consumer group,
over the same lifecycle events (those of ``bench/pipeline.py``), events per second side by side.

    python bench/reconciler_group.py [--events 200000] [--partitions 12] [--members 1,2]

For each group size the events are produced to a fresh topic first; then each member starts in
a process of its own and joins the group, and nobody reads until the partitions are shared out
(each member has rebuilt its partitions' state: that is a restart's cost, not throughput). Then
all members start at once. The rate is the input events handled by all members (the decisions
they read back are not counted) over the time from that start until the last member handled its
last record. Members stay in the group until every member is done, so no one's finish causes a
rebalance of the others.

Needs ``make services-up`` (Kafka on 127.0.0.1:9092).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from typing import Any

from pipeline import run_phase, runtime_log  # bench/pipeline.py (bench/ is on sys.path)

SETTLE = 2.0  # seconds the partitions' owners must stay the same before the start


async def member(prefix: str, partitions: int) -> None:
    """One reconciler process: report what it owns, handle its share on ``go``, report."""
    from consumers.components.reconciler import Reconciler
    from statemachine.policy import Policy

    loop = asyncio.get_running_loop()

    def line() -> asyncio.Future[str]:
        return loop.run_in_executor(None, sys.stdin.readline)

    log = runtime_log(prefix, partitions)
    async with log:
        reconciler = Reconciler(log, Policy())
        seen = 0
        async with reconciler:
            consumer = reconciler.consumer
            assert consumer is not None
            original = reconciler._handle

            async def counting(records: list[Any]) -> int:
                nonlocal seen  # the input events, not the decisions it reads back
                seen += len(records) - sum(
                    1 for r in records if ("event-type", b"AuditFailed") in r.headers
                )
                return await original(records)

            reconciler._handle = counting  # type: ignore[method-assign]
            go = line()
            reported = None
            while not go.done():  # owned: assigned, and its state rebuilt (on_assign done)
                owned = len(consumer.assignment() & set(reconciler.positions))
                if owned != reported:
                    print(json.dumps({"owned": owned}), flush=True)
                    reported = owned
                await asyncio.sleep(0.05)
            start = last = time.time()
            cpu = time.process_time()
            quiet = 0
            while quiet < 2:
                if await reconciler.step():
                    last, quiet = time.time(), 0
                elif await consumer.lag() == 0:
                    quiet += 1
            cpu = time.process_time() - cpu
            print(
                json.dumps(
                    {
                        "events": seen,
                        "start": start,
                        "end": last,
                        "cpu": cpu,
                        "decisions": reconciler.decided,
                    }
                ),
                flush=True,
            )
            await line()  # stay in the group until every member is done


async def group(prefix: str, n: int, partitions: int, members: int) -> dict[str, Any]:
    """Run ``members`` member processes over ``prefix``'s topic; their combined rate."""
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--member",
            "--prefix",
            prefix,
            "--partitions",
            str(partitions),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for _ in range(members)
    ]
    try:
        owned = [0] * members
        changed = time.monotonic()

        async def watch(i: int) -> dict[str, Any]:
            nonlocal changed
            stdout = procs[i].stdout
            assert stdout is not None
            while raw := await stdout.readline():
                msg = json.loads(raw)
                if "owned" not in msg:
                    return dict(msg)
                owned[i], changed = msg["owned"], time.monotonic()
            raise SystemExit(f"member {i} exited (code {await procs[i].wait()})")

        watchers = [asyncio.create_task(watch(i)) for i in range(members)]
        deadline = time.monotonic() + 120
        while sum(owned) != partitions or time.monotonic() - changed < SETTLE:
            if time.monotonic() > deadline:
                raise SystemExit(f"partitions not shared out: {owned}")
            if any(w.done() for w in watchers):
                for w in watchers:
                    if w.done():
                        w.result()  # raises why a member quit
            await asyncio.sleep(0.05)
        shares = list(owned)
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(b"go\n")
            await p.stdin.drain()
        results = await asyncio.gather(*watchers)
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(b"stop\n")
            await p.stdin.drain()
        for p in procs:
            await asyncio.wait_for(p.wait(), 60)
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
    events = sum(r["events"] for r in results)
    elapsed = max(r["end"] for r in results) - min(r["start"] for r in results)
    return {
        "members": members,
        "events": events,
        "rate": events / elapsed,
        "shares": shares,
        "per_member": [r["events"] for r in results],
        "cpu_us_per_event": sum(r["cpu"] for r in results) / max(events, 1) * 1e6,
        "decisions": sum(r["decisions"] for r in results),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--members", default="1,2")
    parser.add_argument("--member", action="store_true")
    parser.add_argument("--prefix")
    args = parser.parse_args()
    if args.member:
        from consumers.runtime.logs import configure_logging

        configure_logging("WARNING", "json")
        from consumers.runtime.collector import tune_gc

        tune_gc()
        asyncio.run(member(args.prefix, args.partitions))
        return
    n = args.events - args.events % 5
    sizes = [int(m) for m in args.members.split(",")]
    print(
        f"reconciler group benchmark: {n} lifecycle events, {args.partitions} partitions, "
        f"{os.cpu_count()} CPUs"
    )
    rates: dict[int, float] = {}
    for size in sizes:
        prefix = f"bench{uuid.uuid4().hex[:8]}"
        run_phase("produce", prefix, n, args.partitions)
        r = asyncio.run(group(prefix, n, args.partitions, size))
        rates[size] = r["rate"]
        print(
            f"  {size} reconciler process{'es' if size > 1 else '  '} {r['rate']:>10,.0f} events/s"
            f"   {r['cpu_us_per_event']:>6.1f} µs CPU/event while handling"
            f"   partitions {r['shares']}, events {r['per_member']} ({r['decisions']} decisions)",
            flush=True,
        )
    if 1 in rates:
        for size, rate in rates.items():
            if size != 1:
                print(f"  {size} processes / 1 process: {rate / rates[1]:.2f}x")


if __name__ == "__main__":
    main()
