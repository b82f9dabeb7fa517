"""Benchmark: decoding lifecycle records, pydantic's path (``codec.decode``) against the
compiled decoder (``codec.read``: views that read like the models), per event on the pipeline
bench's event mix (started, progressed twice, observed, completed), side by side in one run.

    python bench/decode.py [--events 20000] [--rounds 30]

The machine is shared and noisy: the decoders take turns over short slices of the same
records, round after round, and each one's fastest slice and median slice are printed.
Compare the ratios, not the absolute times.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from pipeline import _events

from consumers.eventlog import codec
from consumers.eventlog.wire import decode_view

SLICE = 500


def _per_event(decode: Callable[[bytes], Any], values: list[bytes]) -> float:
    start = time.perf_counter()
    for value in values:
        decode(value)
    return (time.perf_counter() - start) / len(values) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    values = [codec.encode("bench", e).value for e in _events(args.events)]
    # the compiled decoder takes every one of them (it would fall back to pydantic silently)
    assert all(decode_view(v, strict=True) is not None for v in values)
    decoders: dict[str, Callable[[bytes], Any]] = {
        "pydantic (codec.decode)": codec.decode,
        "compiled (codec.read)": codec.read,
        "compiled (codec.read_verbatim)": codec.read_verbatim,
    }
    times: dict[str, list[float]] = {name: [] for name in decoders}
    slices = [values[i : i + SLICE] for i in range(0, len(values), SLICE)]
    for _ in range(args.rounds):
        for part in slices:
            for name, decode in decoders.items():
                times[name].append(_per_event(decode, part))
    base_min = min(times["pydantic (codec.decode)"])
    base_median = statistics.median(times["pydantic (codec.decode)"])
    print(f"{len(values)} events x {args.rounds} rounds, us per event (fastest / median slice)")
    for name, spent in times.items():
        fastest, median = min(spent), statistics.median(spent)
        print(
            f"  {name:34} {fastest:6.2f} / {median:6.2f} us"
            f"   {base_min / fastest:4.2f}x / {base_median / median:4.2f}x cheaper"
        )


if __name__ == "__main__":
    main()
