"""Microbenchmark: the reconciler's work per event after decoding, as its loop does it — the
events no rule judges folded (``Reconciler._fold``, then the overturn check), the others
through ``Reconciler._judge`` (all of them, for a revision whose loop does not fold inline) — over the
lifecycle events of ``bench/pipeline.py``, decoded beforehand, for this checkout and, in the
same process, for another revision of it (``--against``), rounds interleaved.

    python bench/judge.py [--events 100000] [--rounds 7] [--against REF]

The machine is shared and noisy: absolute times swing, the ratio of two versions measured in
one process, round after round, much less (CPU time is measured, the best round kept).
``--against`` extracts ``REF``'s packages with ``git archive`` into a temporary folder and
imports them as a second, independent copy (each copy decodes its own events: an older
revision's rules may tell events apart by their exact class).
Logging is configured as ``bench/pipeline.py`` configures it (WARNING, JSON). No services
needed.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PACKAGES = ("statemachine", "consumers", "projections")


def _ours(name: str) -> bool:
    return name.split(".", 1)[0] in PACKAGES or name == "pipeline"


def load(root: str, n: int) -> tuple[Callable[[], float], list[Any]]:
    """Import the packages under ``root`` as a copy of their own; a run of ``_judge`` over
    ``n`` events (CPU seconds, fresh states each time) and the events."""
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if _ours(k)}
    sys.path[:0] = [root, HERE]
    try:
        import pipeline

        from consumers.components.reconciler import Reconciler
        from consumers.components.reconciler.log import FOLDED_ONLY
        from consumers.eventlog.port import Topics
        from statemachine.policy import Policy

        try:
            from consumers.components.reconciler.judgments import overturns
        except ImportError:  # a revision before judgments.py
            from consumers.components.reconciler import overturns  # type: ignore[attr-defined,no-redef]

        events = pipeline._events(n)
        topics = Topics("bench")
    finally:
        del sys.path[:2]
        for k in [k for k in sys.modules if _ours(k)]:
            del sys.modules[k]
        sys.modules.update(saved)

    def run() -> float:
        reconciler = Reconciler(SimpleNamespace(topics=topics), Policy())  # type: ignore[arg-type]
        states: dict[str, Any] = {}
        holds: dict[str, Any] = {}
        judge = reconciler._judge
        fold = getattr(reconciler, "_fold", None)  # earlier, a helper of three arguments
        inline = fold is not None and len(inspect.signature(fold).parameters) == 4
        folded_only = FOLDED_ONLY if inline else frozenset()
        gc.collect()
        t = time.process_time()  # CPU: a loaded machine deschedules, it does not slow this
        for event in events:
            if event.type in folded_only:
                before = states.get(event.audit_id)
                overturns(before, fold(states, holds, event, before))
            else:
                judge(states, holds, event, False)
        elapsed = time.process_time() - t
        assert reconciler.decided == n // 5 // 4 + (n // 5 % 4 > 0), reconciler.decided
        return elapsed

    return run, events


def extract(ref: str, into: str) -> str:
    archive = subprocess.run(
        ["git", "-C", ROOT, "archive", ref, *PACKAGES], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    return into


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--against", help="a git revision to compare with (e.g. main, HEAD~3)")
    args = parser.parse_args()
    n = args.events - args.events % 5

    sys.path.insert(0, ROOT)
    from consumers.runtime.collector import tune_gc
    from consumers.runtime.logs import configure_logging

    configure_logging("WARNING", "json")  # as the pipeline benchmark's phases run
    tune_gc()

    runs: dict[str, Callable[[], float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.against:
            runs[args.against] = load(extract(args.against, tmp), n)[0]
        runs["this checkout"] = load(ROOT, n)[0]
        best = dict.fromkeys(runs, float("inf"))
        for _ in range(args.rounds):
            for name, run in runs.items():
                best[name] = min(best[name], run())
    print(
        f"The reconciler's fold and judge over {n} pre-decoded events, best of {args.rounds} rounds:"
    )
    for name, seconds in best.items():
        print(f"  {name:<16} {seconds / n * 1e6:7.2f} µs CPU/event")
    if args.against:
        print(f"  speed-up        {best[args.against] / best['this checkout']:7.2f}x")


if __name__ == "__main__":
    main()
