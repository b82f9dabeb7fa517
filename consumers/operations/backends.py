"""The shared resources of a process, opened from settings: the event log, the projection
store, the policy in force, and (lazily) the Workflows API client.

``start()`` connects (and creates topics and tables); retriable failures (the broker or the
database not up yet) are retried with backoff when asked to wait. The Workflows client's budget
and 429 pause live in the store, shared by every process probing the account. It is also the
process's :class:`~consumers.runtime.supervision.Presence`: heartbeats say which components
run here.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, overload

from consumers.eventlog.factory import open_event_log
from consumers.eventlog.port import EventLog, Topics
from consumers.runtime.health import HealthBoard
from consumers.runtime.outages import retrying
from consumers.runtime.settings import Settings
from consumers.workflows.client import WorkflowsClient
from consumers.workflows.discovery import Discovery
from consumers.workflows.queues import QueueClient
from consumers.workflows.ratelimit import ON_DEMAND, SharedRateLimit
from projections.factory import open_store
from projections.store import ProjectionStore
from statemachine.longlived import LongLived

__all__ = ["LIVE_WITHIN", "Backends"]

LIVE_WITHIN = timedelta(seconds=10)
LIVE_REUSE = 1.0  # seconds a read of the live components is reused


class Backends(LongLived):
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topics = Topics(settings.topic_prefix, settings.group_prefix, settings.ingest_topic)
        self.log: EventLog = open_event_log(
            settings.event_log_url, self.topics, **_kafka_options(settings)
        )
        self.store: ProjectionStore = open_store(settings.database_url)
        self.policy = settings.policy()
        self._client: WorkflowsClient | None = None
        self._started = False
        self.process_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.health = HealthBoard()  # this process's components, as its supervisor sees them
        self._live: tuple[float, dict[str, list[str]]] | None = None

    async def start(
        self,
        *,
        init: bool = True,
        wait: float = 0.0,
        with_log: bool = True,
        with_store: bool = True,
    ) -> None:
        """Connect (and create topics/tables). With ``wait`` > 0, retriable failures (the
        broker or the database not up yet) are retried with backoff for that many seconds.
        ``with_log=False`` connects the projection store only (read-only commands);
        ``with_store=False`` the event log only (publishing)."""
        if self._started:
            return

        async def connect() -> None:
            if with_log:
                await self.log.start()
            if with_store:
                await self.store.start()
            if init:
                if with_log:
                    await self.log.init()
                if with_store:
                    await self.store.init()

        await retrying(connect, self.stop, wait=wait, what="backends")
        self._started = True

    async def stop(self) -> None:
        self._started = False
        if self._client is not None:
            await self._client.stop()
            self._client = None
        await self.store.stop()
        await self.log.stop()

    async def client(self) -> WorkflowsClient:
        if self._client is None:
            self._client = self.workflows_client()
            await self._client.start()
        return self._client

    def workflows_client(self) -> WorkflowsClient:
        """A Workflows client of its own (its own connections), spending the account's shared
        budget: the confirmer's, whose calls may wait long for a slot."""
        s = self.settings
        token = s.cloudflare_api_token.get_secret_value() if s.cloudflare_api_token else None
        return WorkflowsClient(
            api_url=s.cloudflare_api_url,
            account_id=s.account_id,
            workflow=s.cloudflare_workflow,
            api_token=token,
            concurrency=s.probe_concurrency,
            budget=s.probe_budget,
            budget_window=s.probe_budget_window.total_seconds(),
            timeout=s.probe_timeout.total_seconds(),
            limiter=self.rate_limit(),
        )

    @overload
    def queue_client(self) -> QueueClient | None: ...
    @overload
    def queue_client(self, queue_id: str) -> QueueClient: ...
    def queue_client(self, queue_id: str | None = None) -> QueueClient | None:
        """The queue ``queue_id``, else the event subscription's, when
        ``AUDITREC_CLOUDFLARE_QUEUE_ID`` names one."""
        s = self.settings
        queue_id = queue_id or s.cloudflare_queue_id
        if queue_id is None:
            return None
        secret = s.cloudflare_queues_token or s.cloudflare_api_token
        return QueueClient(
            api_url=s.cloudflare_api_url,
            account_id=s.account_id,
            queue_id=queue_id,
            api_token=secret.get_secret_value() if secret else None,
            timeout=s.probe_timeout.total_seconds(),
        )

    def rate_limit(self) -> SharedRateLimit:
        """The account's probe budget in the store, with the watchdog's floor and the status
        reads' share of it."""
        s = self.settings
        return SharedRateLimit(
            self.store.budget,
            f"{s.cloudflare_api_url}/accounts/{s.account_id}",
            s.probe_budget,
            s.probe_budget_window.total_seconds(),
            shares={ON_DEMAND: s.on_demand_budget_share},
            floor=s.watchdog_budget_floor,
            sleep=asyncio.sleep,
        )

    async def discovery(self) -> Discovery | None:
        """Bulk discovery for a watchdog, when the settings allow it and probing can work."""
        s = self.settings
        if s.watchdog_bulk_limit <= s.watchdog_batch_limit or s.probing_blind() is not None:
            return None
        return Discovery(await self.client(), limit=s.watchdog_bulk_limit)

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def live_components(self, *, reuse: bool = False) -> dict[str, list[str]]:
        """The components with a recent heartbeat; ``reuse``: a read of the last second will do
        (a status read asks on every call; heartbeats come every two seconds)."""
        cached = self._live
        if reuse and cached is not None and time.monotonic() - cached[0] < LIVE_REUSE:
            return cached[1]
        live = await self.store.coordination.live_components(self.now() - LIVE_WITHIN)
        self._live = (time.monotonic(), live)
        return live

    # -- presence ---------------------------------------------------------------------------

    async def heartbeat(self, names: Sequence[str]) -> None:
        await self.store.coordination.heartbeat(self.process_id, list(names), self.now())

    async def forget(self) -> None:
        await self.store.coordination.forget_process(self.process_id)


def _kafka_options(settings: Settings) -> dict[str, Any]:
    if not settings.event_log_url.startswith("kafka://"):
        return {}
    return {"settings": settings}
