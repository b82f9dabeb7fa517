"""Telemetry: failures found by reconciliation, reported to PostHog exactly once.

- :mod:`.component`: the log consumer that reads decisions and sends them;
- :mod:`.outbox`: what has been sent (kept in the projection store);
- :mod:`.posthog`: the PostHog client, and its capture calls.
"""

from consumers.components.telemetry.component import Telemetry

__all__ = ["Telemetry"]
