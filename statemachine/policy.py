"""The thresholds the rules apply, and how durations are written."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

__all__ = ["MAX_DURATION", "Policy", "format_duration", "parse_duration"]

# The longest duration accepted anywhere: far beyond any threshold, and small enough that a
# time this far back from now is still a datetime.
MAX_DURATION = timedelta(days=36525)  # 100 years
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration(value: str | int | float | timedelta) -> timedelta:
    """``"15m"``, ``"90s"``, ``"1h30m"``, ``"250ms"`` or a number of seconds."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = value.strip().lower()
        try:
            seconds = float(text)
        except ValueError:
            pos, seconds = 0, 0.0
            for match in _PART.finditer(text):
                if match.start() != pos:
                    break
                seconds += float(match.group(1)) * _UNITS[match.group(2)]
                pos = match.end()
            if pos != len(text) or not text:
                raise ValueError(
                    f"not a duration: {value!r} (use e.g. 15m, 90s, 1h, or seconds)"
                ) from None
    if seconds < 0:
        raise ValueError(f"a duration cannot be negative: {value!r}")
    if not seconds <= MAX_DURATION.total_seconds():  # NaN and infinity included
        raise ValueError(f"a duration must be at most 100 years (36525d): {value!r}")
    return timedelta(seconds=seconds)


def format_duration(delta: timedelta) -> str:
    """``8m12s``, ``10m``, ``-3s``: compact and exact to the second."""
    total = delta.total_seconds()
    sign = "-" if total < 0 else ""
    rest = int(abs(total))
    if rest == 0 and abs(total) > 0:
        return f"{sign}{abs(total) * 1000:.0f}ms"
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [(hours, "h"), (minutes, "m"), (seconds, "s")]
    while parts and parts[0][0] == 0:  # no leading zeros: 8m12s, not 0h8m12s
        parts.pop(0)
    while parts and parts[-1][0] == 0:  # no trailing zeros: 10m, not 10m0s
        parts.pop()
    out = "".join(f"{n}{u}" for n, u in parts)
    return sign + (out or "0s")


@dataclass(frozen=True, slots=True)
class Policy:
    """Thresholds in force for the rules of DESIGN §4."""

    stale_running_after: timedelta = timedelta(minutes=15)
    instance_lost_grace: timedelta = timedelta(minutes=10)
    finalize_grace: timedelta = timedelta(minutes=10)
    shadow: bool = False
    # The mass-failure brake (DESIGN §9): a sweep whose ``instance_lost`` decisions number at
    # least ``brake_min_audits`` and more than ``brake_min_share`` of its observations is held.
    # ``brake_min_audits = 0`` switches the brake off.
    brake_min_audits: int = 20
    brake_min_share: float = 0.5
    # Stalled audits (DESIGN §10): no publisher event recorded for ``stalled_after`` while the
    # instance runs; ``timedelta(0)`` switches the rule off. ``report`` records the verdict,
    # ``terminate`` has the instance terminated first, only in ``terminate_workflows``.
    stalled_after: timedelta = timedelta(0)
    stalled_action: str = "report"
    terminate_workflows: frozenset[str] = frozenset()
    default_workflow: str = "site-audit"

    @property
    def stalls_on(self) -> bool:
        return self.stalled_after > timedelta(0)

    def may_terminate(self, workflow: str | None) -> bool:
        """Whether a stalled audit of ``workflow`` (``None``: the default) is terminated."""
        return (
            self.stalled_action == "terminate"
            and not self.shadow
            and (workflow or self.default_workflow) in self.terminate_workflows
        )

    @property
    def brake_on(self) -> bool:
        """Whether decisions may be held (never in shadow mode: nothing fails there)."""
        return self.brake_min_audits > 0 and not self.shadow

    def brake_trips(self, lost: int, observations: int) -> bool:
        """Whether a sweep with ``lost`` ``instance_lost`` decisions among ``observations``
        engages the brake."""
        return (
            self.brake_on
            and lost >= self.brake_min_audits
            and lost > self.brake_min_share * observations
        )

    @classmethod
    def from_evidence(cls, evidence: Mapping[str, Any], default: Policy) -> Policy:
        """The policy a decision recorded (:meth:`evidence`); what it lacks comes from
        ``default``."""

        def seconds(key: str, fallback: timedelta) -> timedelta:
            value = evidence.get(key)
            if (
                isinstance(value, int | float)
                and not isinstance(value, bool)
                and 0 <= value <= MAX_DURATION.total_seconds()
            ):
                return timedelta(seconds=value)
            return fallback

        def number(key: str, fallback: float) -> float:
            value = evidence.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
                return value
            return fallback

        mode = evidence.get("mode")
        return cls(
            stale_running_after=seconds("stale_running_after_s", default.stale_running_after),
            instance_lost_grace=seconds("instance_lost_grace_s", default.instance_lost_grace),
            finalize_grace=seconds("finalize_grace_s", default.finalize_grace),
            shadow=default.shadow if mode not in ("shadow", "enforce") else mode == "shadow",
            brake_min_audits=int(number("brake_min_audits", default.brake_min_audits)),
            brake_min_share=number("brake_min_share", default.brake_min_share),
            stalled_after=seconds("stalled_after_s", default.stalled_after),
            stalled_action=(
                evidence["stalled_action"]
                if evidence.get("stalled_action") in ("report", "terminate")
                else default.stalled_action
            ),
            terminate_workflows=default.terminate_workflows,
            default_workflow=default.default_workflow,
        )

    def evidence(self) -> dict[str, Any]:
        """The thresholds as carried by every decision, in seconds."""
        return {
            "stale_running_after_s": self.stale_running_after.total_seconds(),
            "instance_lost_grace_s": self.instance_lost_grace.total_seconds(),
            "finalize_grace_s": self.finalize_grace.total_seconds(),
            "mode": "shadow" if self.shadow else "enforce",
            "brake_min_audits": self.brake_min_audits,
            "brake_min_share": self.brake_min_share,
            **(
                {
                    "stalled_after_s": self.stalled_after.total_seconds(),
                    "stalled_action": self.stalled_action,
                }
                if self.stalls_on
                else {}
            ),
        }
