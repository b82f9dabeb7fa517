"""Benchmark (b): the reconciler's memory per running audit.

N running audits (realistic ids, URLs, users) are appended to an embedded log; a real
``Reconciler`` consumes and folds them.
Memory is the growth of traced allocations retained by the reconciler, divided by N (target
≤ 1 KB). Then the same for N audits failed by the reconciler (they may still be overturned or
restored: a compact shared state and their event ids are kept) and failed by the workflow
(final: the state only). Side by side: the cost of attaching a ``transitions`` Machine to each audit
(``add_model``), measured on a smaller sample and given per audit.

    python bench/memory.py [--audits 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import tempfile
import time
import tracemalloc
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from consumers.components.reconciler import Reconciler
from consumers.eventlog.codec import encode
from consumers.eventlog.port import Topics
from consumers.eventlog.sqlite.log import SQLiteEventLog
from statemachine.events import (
    AuditFailed,
    AuditFailedData,
    AuditProgressed,
    AuditProgressedData,
    AuditStarted,
    AuditStartedData,
)
from statemachine.policy import Policy


def events(n: int, failed_by: str | None = None) -> list:
    """Two events of each of ``n`` audits (a third, its failure, with ``failed_by``)."""
    t0 = datetime(2026, 11, 30, 8, tzinfo=UTC)
    out = []
    for i in range(n):
        audit = f"audit-{uuid.UUID(int=i)}"
        out.append(
            AuditStarted(
                event_id=uuid.uuid4(),
                audit_id=audit,
                occurred_at=t0 + timedelta(seconds=i),
                producer="crawler",
                data=AuditStartedData(
                    project_id=f"proj-{i % 5000:05d}",
                    organization_id=f"org-{i % 700:04d}",
                    started_by_user_id=f"user-{i % 20000:06d}",
                    start_url=f"https://site-{i}.example.com/",
                    workflow_instance_id=f"wf-{uuid.UUID(int=i)}",
                    pages_total=500,
                ),
            )
        )
        out.append(
            AuditProgressed(
                event_id=uuid.uuid4(),
                audit_id=audit,
                occurred_at=t0 + timedelta(seconds=i + 60),
                producer="crawler",
                data=AuditProgressedData(current_phase="crawl", pages_crawled=i % 500),
            )
        )
        if failed_by is not None:
            out.append(
                AuditFailed(
                    event_id=uuid.uuid4(),
                    audit_id=audit,
                    occurred_at=t0 + timedelta(seconds=i + 120),
                    producer="auditrec-reconciler" if failed_by == "reconciler" else "crawler",
                    data=AuditFailedData(
                        error_code="oom", error_detail="out of memory", failed_by=failed_by
                    ),
                )
            )
    return out


async def reconciler_bytes_per_audit(n: int, failed_by: str | None = None) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        topics = Topics("bench")
        log = SQLiteEventLog(f"sqlite:///{Path(tmp)}/e.db", topics)
        async with log:
            await log.init()
            batch = events(n, failed_by)
            for i in range(0, len(batch), 20_000):
                await log.append([encode(topics.lifecycle, e) for e in batch[i : i + 20_000]])
            del batch
            gc.collect()
            reconciler = Reconciler(log, Policy())
            async with reconciler:
                tracemalloc.start()
                gc.collect()
                before = tracemalloc.get_traced_memory()[0]
                t = time.perf_counter()
                reconciler.max_records = 20_000
                while await reconciler.step() or not await reconciler.idle():
                    pass
                elapsed = time.perf_counter() - t
                gc.collect()
                after = tracemalloc.get_traced_memory()[0]
                tracemalloc.stop()
                assert reconciler.running == (n if failed_by is None else 0)
                return (after - before) / n, elapsed


def machine_bytes_per_audit(n: int) -> tuple[float, float]:
    from transitions import Machine

    from statemachine.machine import STATES, TRANSITIONS

    machine = Machine(model=None, states=list(STATES), initial="none", auto_transitions=False)
    for row in TRANSITIONS:
        machine.add_transition(row["trigger"], row["source"], row["dest"])
    models = [type("Audit", (), {})() for _ in range(n)]
    tracemalloc.start()
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    t = time.perf_counter()
    for m in models:
        machine.add_model(m)
    elapsed = time.perf_counter() - t
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / n, elapsed / n


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--audits", type=int, default=100_000)
    parser.add_argument("--machine-sample", type=int, default=2_000)
    args = parser.parse_args()
    per_audit, elapsed = await reconciler_bytes_per_audit(args.audits)
    print(f"reconciler with {args.audits} running audits folded ({2 * args.audits} events)")
    print(f"  memory         {per_audit:7.0f} B per running audit  (target ≤ 1024 B)")
    print(f"  fold time      {elapsed:7.2f} s  ({2 * args.audits / elapsed:,.0f} events/s, traced)")
    for by in ("reconciler", "workflow"):
        failed, _ = await reconciler_bytes_per_audit(args.audits, by)
        print(f"  memory         {failed:7.0f} B per audit failed by the {by}")
    m_bytes, m_time = machine_bytes_per_audit(args.machine_sample)
    print(f"a transitions Machine per audit (add_model, {args.machine_sample} sampled)")
    print(f"  memory         {m_bytes:7.0f} B per audit  → {m_bytes / per_audit:.0f}× ours")
    print(f"  add_model      {m_time * 1e6:7.1f} µs per audit")


if __name__ == "__main__":
    asyncio.run(main())
