"""The garbage collector of a long-running process, tuned once at start-up (``auditrec serve``
and the benchmarks, which measure what it runs)."""

from __future__ import annotations

import gc

__all__ = ["tune_gc"]


def tune_gc() -> None:
    """Collect garbage less often in a long-running consumer.

    Consumers create and drop many small acyclic objects (events, states, records) while
    holding a large live heap (one state per audit); with the default thresholds the cyclic
    collector rescans that heap constantly. Objects alive at start-up are frozen out of
    collection.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(500_000, 50, 100)
