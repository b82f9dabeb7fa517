"""Telemetry's outbox: the captures waiting for PostHog, delivered oldest first.

A capture is recorded in ``telemetry_sent`` (the projection store) once PostHog answered it, and
one already recorded is skipped, so a restart does not resend. A failed attempt backs off
delivery for every capture, not just the one that failed (PostHog is down or slow), with
exponential backoff up to ``retry_cap``; after ``max_attempts`` a capture is given up (logged,
counted ``failed``). Counter ``auditrec_telemetry{result}``: ``sent``, ``retried``, ``failed``,
``skipped``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from consumers.eventlog.port import TopicPartition
from consumers.runtime.metrics import TELEMETRY
from projections.telemetry import SentTelemetry

__all__ = ["Outbox", "Pending"]

log = structlog.get_logger("auditrec.telemetry")


@dataclass
class Pending:
    """A capture waiting for PostHog, and the record it came from (offsets are committed
    only up to the oldest one still waiting)."""

    tp: TopicPartition
    offset: int
    event_id: str
    audit_id: str
    capture: dict[str, Any]
    attempts: int = 0


class Outbox:
    def __init__(
        self,
        sent: SentTelemetry,
        send: Callable[[Pending], Awaitable[bool]],
        *,
        retry_base: float,
        retry_cap: float,
        max_attempts: int,
    ) -> None:
        self.record = sent
        self.send = send
        self.retry_base = retry_base
        self.retry_cap = retry_cap
        self.max_attempts = max_attempts
        self.items: list[Pending] = []
        self.sent = 0
        self._failures = 0  # consecutive failed attempts: PostHog is down or slow
        self.blocked_until = 0.0  # time.monotonic() before which nothing is tried

    async def deliver(self) -> int:
        """Try the waiting captures, oldest first, until one fails; how many were settled
        (sent, skipped as sent before, or given up)."""
        if not self.items or time.monotonic() < self.blocked_until:
            return 0
        already = await self.record.telemetry_sent(p.event_id for p in self.items)
        done = 0
        for item in list(self.items):
            if item.event_id in already:
                TELEMETRY.labels("skipped").inc()
                self.items.remove(item)
                done += 1
                continue
            item.attempts += 1
            if await self.send(item):
                await self.record.mark_telemetry_sent(item.event_id, datetime.now(UTC))
                TELEMETRY.labels("sent").inc()
                self.sent += 1
                self.items.remove(item)
                self._failures = 0
                done += 1
                log.info(
                    "telemetry sent",
                    audit_id=item.audit_id,
                    event_id=item.event_id,
                    attempts=item.attempts,
                )
                continue
            done += self._failed(item)
            break  # PostHog is down or slow: back off for every capture, not just this one
        return done

    def _failed(self, item: Pending) -> int:
        """Back off; 1 when ``item`` is given up, else 0 (it is retried)."""
        self._failures += 1
        delay = min(self.retry_base * 2 ** (self._failures - 1), self.retry_cap)
        self.blocked_until = time.monotonic() + delay
        if item.attempts >= self.max_attempts:
            TELEMETRY.labels("failed").inc()
            self.items.remove(item)
            log.error(
                "telemetry given up",
                audit_id=item.audit_id,
                event_id=item.event_id,
                attempts=item.attempts,
            )
            return 1
        TELEMETRY.labels("retried").inc()
        log.warning(
            "telemetry not delivered; will retry",
            audit_id=item.audit_id,
            event_id=item.event_id,
            attempts=item.attempts,
            retry_in_s=round(delay, 2),
        )
        return 0
