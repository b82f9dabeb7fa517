"""How each component of this process is doing, as the supervisor sees it: failing (its steps
keep raising), stalled (it has lag but makes no progress), or well. ``/readyz`` answers 503
naming a component that is not well, and the metrics show it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from consumers.runtime.metrics import COMPONENT_HEALTHY

__all__ = ["FAILING_AFTER", "STALLED_AFTER", "HealthBoard"]

FAILING_AFTER = 3  # consecutive failed steps
STALLED_AFTER = 60.0  # seconds with lag and no progress


@dataclass
class _Entry:
    failures: int = 0
    error: str | None = None
    progress_at: float = field(default_factory=time.monotonic)
    lag: int = 0
    starting: bool = False


class HealthBoard:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._entries: dict[str, _Entry] = {}
        self._clock = clock
        self._warnings: dict[str, str] = {}

    def warn(self, name: str, warning: str | None) -> None:
        """Set (or, with ``None``, clear) ``name``'s warning: something ``/readyz`` reports
        without calling the process unready (a source of observations that went quiet, with
        polling still working)."""
        if warning is None:
            self._warnings.pop(name, None)
        else:
            self._warnings[name] = warning

    def warnings(self) -> list[str]:
        return [f"{name}: {text}" for name, text in sorted(self._warnings.items())]

    def expect(self, name: str) -> None:
        """``name`` is being built and started (readiness says so until it has started)."""
        if name not in self._entries:
            self._entries[name] = _Entry(starting=True)

    def forget(self, name: str) -> None:
        """``name`` is not run here after all (switched off)."""
        self._entries.pop(name, None)

    def started(self, name: str) -> None:
        self._entries[name] = _Entry(progress_at=self._clock())
        COMPONENT_HEALTHY.labels(name).set(1)

    def stepped(self, name: str, handled: int) -> None:
        entry = self._entries.setdefault(name, _Entry())
        entry.failures, entry.error = 0, None
        if handled or entry.lag == 0:
            entry.progress_at = self._clock()
        self._publish(name)

    def failed(self, name: str, error: BaseException) -> None:
        entry = self._entries.setdefault(name, _Entry())
        entry.failures += 1
        entry.error = f"{type(error).__name__}: {error}"[:300]
        self._publish(name)

    def lagging(self, name: str, lag: int) -> None:
        entry = self._entries.setdefault(name, _Entry())
        if lag == 0 or entry.lag == 0:
            entry.progress_at = self._clock()
        entry.lag = lag
        self._publish(name)

    def problems(self) -> dict[str, str]:
        """Components that are not well, and why."""
        out: dict[str, str] = {}
        now = self._clock()
        for name, entry in self._entries.items():
            if entry.starting:
                out[name] = "starting"
            elif entry.failures >= FAILING_AFTER:
                out[name] = f"failing ({entry.failures} steps in a row): {entry.error}"
            elif entry.lag > 0 and now - entry.progress_at >= STALLED_AFTER:
                stalled = now - entry.progress_at
                out[name] = f"stalled: lag {entry.lag}, no progress for {stalled:.0f}s"
        return out

    def snapshot(self) -> dict[str, tuple[str, int]]:
        """Every component this process runs, with its state (``ok``, or why not, as in
        :meth:`problems`) and its last known lag in records (the console shows them)."""
        problems = self.problems()
        return {
            name: (problems.get(name, "ok"), entry.lag)
            for name, entry in sorted(self._entries.items())
        }

    def _publish(self, name: str) -> None:
        COMPONENT_HEALTHY.labels(name).set(0 if name in self.problems() else 1)
