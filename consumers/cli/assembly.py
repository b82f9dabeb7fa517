"""The composition root: which component each name stands for, built on one process's
backends, and the operations wired to run the pipeline in-process when asked (``--inline``).

Nothing below the interfaces knows this catalogue: the supervisor runs what it is handed, and
:class:`~consumers.operations.service.Operations` is handed a way to run the pipeline.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta

import structlog

from consumers.api.server import ApiServer
from consumers.components.brake import Brake
from consumers.components.confirmer import Confirmer, awaiting_confirmation
from consumers.components.ingest import Ingest
from consumers.components.orphans import OrphanScan
from consumers.components.outcomes import Feed, Outcomes, QueueSender, WebhookSender
from consumers.components.probe import Probe
from consumers.components.projector import Projector
from consumers.components.reconciler import Reconciler
from consumers.components.retention import Retention
from consumers.components.subscriber import Subscriber
from consumers.components.telemetry import Telemetry
from consumers.components.watchdog import Watchdog
from consumers.operations.backends import Backends
from consumers.operations.freshness import Freshness
from consumers.operations.service import Operations
from consumers.runtime.component import Component
from consumers.runtime.names import COMPONENTS, PIPELINE
from consumers.runtime.supervision import Builder, Supervisor
from statemachine.errors import ConfigError

__all__ = ["Service", "operations", "parse_components"]

log = structlog.get_logger("auditrec")


def parse_components(text: str | None) -> list[str]:
    if not text:
        return list(COMPONENTS)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in COMPONENTS]
    if unknown or not names:
        raise ConfigError(
            f"--only: unknown component(s) {', '.join(unknown) or '(none)'}; "
            f"choose from {', '.join(COMPONENTS)}"
        )
    return list(dict.fromkeys(names))


def operations(backends: Backends) -> Operations:
    """What the CLI and the API share, able to run the pipeline here when no serve does."""

    async def run_pipeline(timeout: float) -> None:
        async with Service(backends, PIPELINE) as service:
            await service.drain(timeout=timeout)

    return Operations(backends, run_pipeline=run_pipeline)


def _builder(backends: Backends, name: str) -> Builder:
    s = backends.settings

    async def projector(built: dict[str, Component]) -> Component:
        return Projector(backends.log, backends.store.writer)

    async def reconciler(built: dict[str, Component]) -> Component:
        async def brake_engaged() -> bool:
            return (await backends.store.brake.state()).engaged

        return Reconciler(
            backends.log,
            backends.policy,
            brake_engaged=brake_engaged,
            checkpoints=backends.store.checkpoints,
        )

    async def probe(built: dict[str, Component]) -> Component:
        blind = s.probing_blind()
        if blind is not None:
            raise ConfigError(f"probe: {blind}")
        return Probe(
            backends.log,
            await backends.client(),
            default_workflow=s.cloudflare_workflow,
            terminable=s.terminate_workflow_names(),
        )

    async def confirming() -> set[str]:
        """The audits whose confirmation waits, while a confirmer runs somewhere to answer
        them (else the watchdog asks about them itself)."""
        if not (await backends.live_components(reuse=True)).get(Confirmer.name):
            return set()
        return await awaiting_confirmation(backends.log)

    async def watchdog(built: dict[str, Component]) -> Component:
        freshness = Freshness(backends.log, backends.store)

        async def projection_caught_up() -> bool:
            # Whichever processes run the projector: the table has what the log holds.
            return await freshness.wait(0.0)

        return Watchdog(
            backends.log,
            backends.store,
            stale_after=s.stale_running_after,
            interval=s.watchdog_interval,
            batch_limit=s.watchdog_batch_limit,
            ready=projection_caught_up,
            fresh=projection_caught_up,
            policy=backends.policy,
            owner=backends.process_id,
            answer_within=s.sweep_wait,
            brake=Brake(
                backends.log,
                backends.store,
                backends.policy,
                owner=backends.process_id,
                window=s.brake_window,
            ),
            discovery=await backends.discovery(),
            retention=_retention(backends),
            confirming=confirming if s.cloudflare_queue_id is not None else None,
            orphans=await _orphan_scan(backends, projection_caught_up),
            cloudflare_retention=s.cloudflare_retention,
        )

    async def telemetry(built: dict[str, Component]) -> Component | None:
        if s.posthog_api_key is None:
            log.info("telemetry off: AUDITREC_POSTHOG_API_KEY is not set")
            return None
        return Telemetry(backends.log, backends.store, s)

    async def outcomes(built: dict[str, Component]) -> Component | None:
        refusal = s.outcomes_refusal()
        if refusal is not None:
            raise ConfigError(f"outcomes: {refusal}")
        endpoints = s.outcome_endpoints()
        if not endpoints:
            log.info(
                "outcome feed off: neither AUDITREC_WEBHOOK_URLS nor AUDITREC_OUTCOME_QUEUE_ID"
            )
            return None
        feeds = []
        for endpoint in endpoints:
            sender: WebhookSender | QueueSender
            if endpoint.kind == "queue":
                sender = QueueSender(
                    backends.queue_client(endpoint.address),
                    deadline=s.probe_timeout.total_seconds(),
                )
            else:
                assert s.webhook_secret is not None
                sender = WebhookSender(
                    endpoint.address,
                    s.webhook_secret.get_secret_value(),
                    timeout=s.webhook_timeout.total_seconds(),
                )
            feeds.append(
                Feed(
                    backends.log,
                    backends.store,
                    endpoint,
                    sender,
                    retry_for=s.webhook_retry_for.total_seconds(),
                )
            )
        return Outcomes(feeds)

    async def ingest(built: dict[str, Component]) -> Component:
        return Ingest(backends.log)

    async def subscriber(built: dict[str, Component]) -> Component | None:
        queue = backends.queue_client()
        if queue is None:
            log.info("event subscription off: AUDITREC_CLOUDFLARE_QUEUE_ID is not set")
            return None
        return Subscriber(
            backends.log,
            backends.store,
            queue,
            workflow=s.cloudflare_workflow,
            workflows=s.watched_workflows(),
            poll=s.subscription_poll.total_seconds(),
            batch=s.subscription_batch,
            visibility=s.subscription_visibility.total_seconds(),
            health=backends.health,
            caught_up=functools.partial(Freshness(backends.log, backends.store).wait, 0.0),
        )

    async def confirmer(built: dict[str, Component]) -> Component | None:
        if s.cloudflare_queue_id is None:
            return None
        blind = s.probing_blind()
        if blind is not None:
            raise ConfigError(f"confirmer: {blind}")
        client = backends.workflows_client()
        await client.start()
        return Confirmer(backends.log, client, backends.store)

    async def api(built: dict[str, Component]) -> Component:
        return ApiServer(Operations(backends))

    builders: dict[str, Builder] = {
        "projector": projector,
        "reconciler": reconciler,
        "probe": probe,
        "watchdog": watchdog,
        "telemetry": telemetry,
        "outcomes": outcomes,
        "ingest": ingest,
        "subscriber": subscriber,
        "confirmer": confirmer,
        "api": api,
    }
    return builders[name]


async def _orphan_scan(
    backends: Backends, fresh: Callable[[], Awaitable[bool]]
) -> OrphanScan | None:
    """The orphan scan for a watchdog, unless ``AUDITREC_ORPHAN_INTERVAL`` is 0 or probing
    cannot work."""
    s = backends.settings
    if s.orphan_interval <= timedelta(0):
        log.info("orphan scan off: AUDITREC_ORPHAN_INTERVAL is 0")
        return None
    if s.probing_blind() is not None:
        return None
    return OrphanScan(
        backends.store,
        await backends.client(),
        workflows=s.watched_workflows(),
        grace=s.instance_lost_grace,
        interval=s.orphan_interval,
        owner=backends.process_id,
        fresh=fresh,
        within=s.sweep_wait.total_seconds() / 2,
    )


def _retention(backends: Backends) -> Retention | None:
    keep = backends.settings.kafka_lifecycle_retention
    if keep is None:
        return None
    group = backends.topics.group
    return Retention(backends.log, backends.store, keep, projector=group(Projector.name),
                     checkpointing=[group(Reconciler.name)],
                     once_run=[group(Telemetry.name), *_feed_groups(backends)])  # fmt: skip


def _feed_groups(backends: Backends) -> list[str]:
    """The outcome feeds' groups: each holds retention back once it has run."""
    try:
        endpoints = backends.settings.outcome_endpoints()
    except ConfigError:
        return []
    return [backends.topics.group(f"outcomes-{e.name}") for e in endpoints]


class Service(Supervisor):
    """The named components on one process's backends. ``async with`` starts and stops them."""

    def __init__(self, backends: Backends, names: Iterable[str]) -> None:
        wanted = set(names)
        self.backends = backends
        builders = [(n, _builder(backends, n)) for n in COMPONENTS if n in wanted]
        super().__init__(builders, backends, backends.health)

    async def start(self, *, wait: float = 0.0) -> None:
        # Instances of a watched workflow created from its first registration on can be
        # orphans: registered as the service starts, unless `auditrec init` did.
        s = self.backends.settings
        await self.backends.store.orphans.watch(s.watched_workflows(), self.backends.now())
        await super().start(wait=wait)
