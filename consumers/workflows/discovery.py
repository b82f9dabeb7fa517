"""Bulk discovery: which of a workflow's instances are alive, read from its instance listing.

A tick over thousands of stale audits cannot afford one request per audit (Cloudflare allows
1,200 requests per 5 minutes per account, and blocks every call for 5 minutes past that). A
listing page answers for up to ``per_page`` instances at once, so a watchdog tick pages through
the instances created since its oldest stale audit started (less :data:`MARGIN`, for clocks and
for instances created before their audit's first event), once per status that means alive
(:data:`~statemachine.vocabulary.LISTED_ALIVE_STATUSES`). An audit whose instance is listed
alive is observed from the listing without a request of its own.

Everything else is asked for alone, because a decision needs what a listing does not carry:
an errored or terminated instance's error message (to classify the failure), a complete one's
end time, or the confirmation that an instance absent from every listing is really gone. Nothing
is ever failed on the listing alone. Listing only the alive statuses keeps its cost to the
instances that are running, not every instance that ever finished in the window.

The pages are requests like any other: they take slots of the shared budget (the watchdog's)
and wait out 429 pauses. A listing that fails (the endpoint unsupported, a refusal, the budget,
a cursor that does not end) answers the :class:`~consumers.workflows.answers.ProbeFailure`;
the watchdog then probes one audit at a time, as without a listing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from consumers.workflows.answers import ProbeFailure
from consumers.workflows.client import WorkflowsClient
from consumers.workflows.ratelimit import WATCHDOG
from statemachine.events import ProbeFailureReason
from statemachine.vocabulary import LISTED_ALIVE_STATUSES

__all__ = ["MARGIN", "Discovery", "Listing"]

MARGIN = timedelta(hours=1)


@dataclass(frozen=True)
class Listing:
    alive: dict[str, str]
    """Instance id → its listed status, for the instances listed alive."""
    at: datetime
    """When the listing was begun: each listed instance was alive then or later."""
    requests: int
    created: dict[str, datetime] = field(default_factory=dict)
    """Instance id → its ``created_on``, for the instances listed alive that carry one."""
    workflow: str = ""
    """The workflow listed."""


class Discovery:
    """Lists a workflow's alive instances for a watchdog tick of up to ``limit`` audits."""

    def __init__(
        self,
        client: WorkflowsClient,
        *,
        limit: int,
        per_page: int = 100,
        max_pages: int = 2000,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.limit = limit
        self.per_page = per_page
        self.max_pages = max_pages
        self.clock = clock

    async def alive_since(
        self, since: datetime, within: float, *, workflow: str | None = None
    ) -> Listing | ProbeFailure:
        """The instances of ``workflow`` (default: the client's) created since ``since`` (less
        :data:`MARGIN`) that are alive; the pages may take ``within`` seconds in all, waits for
        budget and pauses included."""
        at = self.clock()
        deadline = time.monotonic() + within
        alive: dict[str, str] = {}
        created: dict[str, datetime] = {}
        requests = 0
        for status in LISTED_ALIVE_STATUSES:
            cursor: str | None = None
            seen: set[str] = set()
            while True:
                if requests >= self.max_pages:
                    return _failure(f"the listing is longer than {self.max_pages} pages")
                page = await self.client.list_instances(
                    status=status,
                    date_start=since - MARGIN,
                    per_page=self.per_page,
                    cursor=cursor,
                    workflow=workflow,
                    wait=max(deadline - time.monotonic(), 0.0),
                    spender=WATCHDOG,
                )
                requests += 1
                if isinstance(page, ProbeFailure):
                    return page
                for instance, listed, created_on in page.items:
                    if listed in LISTED_ALIVE_STATUSES:  # whatever filter the API applied
                        alive[instance] = listed
                        if created_on is not None:
                            created[instance] = created_on
                if page.cursor is None:
                    break
                if page.cursor in seen:
                    return _failure(f"the listing's cursor {page.cursor[:40]!r} came back")
                seen.add(page.cursor)
                cursor = page.cursor
        name = self.client.workflow if workflow is None else workflow
        return Listing(alive, at, requests, created, name)


def _failure(detail: str) -> ProbeFailure:
    return ProbeFailure(ProbeFailureReason.INVALID_RESPONSE, None, detail)
