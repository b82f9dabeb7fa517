"""The components' names: what ``serve --only`` takes, what heartbeats announce."""

from __future__ import annotations

from typing import Final

__all__ = ["COMPONENTS", "PIPELINE"]

COMPONENTS: Final = (
    "projector",
    "reconciler",
    "probe",
    "watchdog",
    "telemetry",
    "outcomes",
    "ingest",
    "subscriber",
    "confirmer",
    "api",
)
# What an on-demand read or a sweep needs running somewhere to get an outcome.
PIPELINE: Final = ("projector", "reconciler", "probe")
