"""``auditrec doctor``: the effective configuration and checks of every service auditrec
needs, each within a time limit, all read only (no topic, table or schema is ever created or
migrated, nothing is written to the log).

Checks, in order: ``event log`` (reachable, topics present), ``database`` (reachable, schema
version current), ``workflows api`` (token, account and workflow), ``event subscription``
(the queue's metadata and its HTTP pull consumer, never a pull), ``posthog`` (the host
answers, when telemetry is on), ``outcome feed`` (what ``serve`` would refuse about it, each
endpoint answers), ``clock`` (skew against the event log's machine), ``api`` (what
``serve`` would refuse about the API's tokens and address).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from consumers.operations.doctor.configuration import Setting, effective_configuration, mask
from consumers.operations.doctor.database import check_database
from consumers.operations.doctor.eventlog import check_clock, check_event_log
from consumers.operations.doctor.exposure import check_api
from consumers.operations.doctor.report import CHECK_TIMEOUT, Check, bounded
from consumers.operations.doctor.services import (
    check_outcomes,
    check_posthog,
    check_subscription,
    check_workflows,
)
from consumers.runtime.settings import Settings

__all__ = ["Check", "Setting", "diagnose", "effective_configuration", "mask"]


async def diagnose(settings: Settings, timeout: float = CHECK_TIMEOUT) -> list[Check]:
    """Every check, run concurrently; none takes much over ``timeout`` seconds."""
    s = settings
    checks: list[tuple[str, Callable[[], Awaitable[Check]], str]] = [
        ("event log", lambda: check_event_log(s, timeout), "check AUDITREC_EVENT_LOG_URL"),
        ("database", lambda: check_database(s, timeout), "check AUDITREC_DATABASE_URL"),
        ("workflows api", lambda: check_workflows(s, timeout), "check AUDITREC_CLOUDFLARE_API_URL"),
        (
            "event subscription",
            lambda: check_subscription(s, timeout),
            "check AUDITREC_CLOUDFLARE_QUEUE_ID and AUDITREC_CLOUDFLARE_API_URL",
        ),
        ("posthog", lambda: check_posthog(s, timeout), "check AUDITREC_POSTHOG_HOST"),
        ("outcome feed", lambda: check_outcomes(s, timeout), "check AUDITREC_WEBHOOK_URLS"),
        ("clock", lambda: check_clock(s, timeout), "sync the clock (NTP)"),
        ("api", lambda: check_api(s), "check AUDITREC_API_TOKENS and AUDITREC_API_HOST"),
    ]
    slow = timeout + 1.0  # each check bounds its own I/O; this is the backstop
    return list(await asyncio.gather(*(bounded(n, c, fix, slow) for n, c, fix in checks)))
