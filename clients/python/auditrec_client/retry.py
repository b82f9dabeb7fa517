"""When and how long to wait before trying a request again.

Retried: a request that got no answer (connection refused, cut before the answer, timeout),
429 and 500/502/503/504. Retrying a publish is safe because its events' ids were fixed before
the first attempt: auditrec applies an ``event_id`` once. The wait doubles from ``backoff`` up
to ``max_backoff``, with jitter so that many publishers cut off together do not return
together; a ``Retry-After`` of the answer is honoured up to ``max_retry_after``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["RETRIED_STATUSES", "Retry"]

RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class Retry:
    """``attempts`` counts the first one: ``Retry(attempts=1)`` never retries."""

    attempts: int = 5
    backoff: float = 0.2
    max_backoff: float = 5.0
    max_retry_after: float = 30.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts: must be at least 1")
        if self.backoff < 0 or self.max_backoff < 0 or self.max_retry_after < 0:
            raise ValueError("backoff, max_backoff and max_retry_after must not be negative")

    def delay(self, attempt: int, retry_after: str | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        wait: float = min(self.max_backoff, self.backoff * 2.0 ** (attempt - 1))
        wait *= 0.5 + random.random() / 2
        if retry_after is not None:
            try:
                asked = float(retry_after)
            except ValueError:  # an HTTP date: not worth parsing, use the backoff
                asked = 0.0
            wait = max(wait, min(asked, self.max_retry_after))
        return wait
