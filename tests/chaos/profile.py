"""How big a chaos run is, from the environment.

``make test`` runs the short profile (the defaults); ``make chaos`` sets a long one:

- ``AUDITREC_CHAOS_AUDITS``: audits published (default 300);
- ``AUDITREC_CHAOS_KILLS``: SIGKILLs of a serve process, each restarted at once (default 4);
- ``AUDITREC_CHAOS_RESTARTS``: services restarted once each, comma-separated, of ``kafka``
  and ``postgres`` (default ``kafka``; empty: none);
- ``AUDITREC_CHAOS_SEED``: the seed of the plan and of the kill points (default 20261130);
- ``AUDITREC_CHAOS_SUMMARY``: a file the summary is also written to.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RECOVERY_TARGET", "Profile"]

RECOVERY_TARGET = 15.0  # seconds, p90 of the recovery after a SIGKILL
SERVICES = ("kafka", "postgres")


def _int(name: str, default: int, least: int) -> int:
    raw = os.environ.get(name, "").strip()
    value = int(raw) if raw else default
    if value < least:
        raise ValueError(f"{name} must be at least {least}, not {value}")
    return value


@dataclass(frozen=True)
class Profile:
    audits: int
    kills: int
    restarts: tuple[str, ...]
    seed: int
    summary_file: Path | None

    @classmethod
    def from_env(cls) -> Profile:
        raw = os.environ.get("AUDITREC_CHAOS_RESTARTS", "kafka")
        restarts = tuple(s.strip() for s in raw.split(",") if s.strip())
        unknown = [s for s in restarts if s not in SERVICES]
        if unknown or len(set(restarts)) != len(restarts):
            raise ValueError(f"AUDITREC_CHAOS_RESTARTS: each of {SERVICES} at most once: {raw!r}")
        summary = os.environ.get("AUDITREC_CHAOS_SUMMARY", "").strip()
        return cls(
            audits=_int("AUDITREC_CHAOS_AUDITS", 300, 50),
            kills=_int("AUDITREC_CHAOS_KILLS", 4, 1),
            restarts=restarts,
            seed=_int("AUDITREC_CHAOS_SEED", 20261130, 0),
            summary_file=Path(summary) if summary else None,
        )

    @property
    def long(self) -> bool:
        """The long profile (``make chaos``): bounds on the figures are asserted too."""
        return self.kills >= 10

    @property
    def timeout(self) -> float:
        """A bound for the whole run (pytest-timeout), generous: a hang fails, slowness not."""
        return 300 + 0.2 * self.audits + 60 * self.kills + 180 * len(self.restarts)
