"""What operators and other services ask of auditrec, shared by the CLI and the HTTP API:
publish events, read an audit with on-demand reconciliation, sweep, replay.

Probing and deciding are done by the pipeline (probe → reconciler → projector). When a
``serve`` process runs it (seen through its heartbeats), requests go through the log and the
answer is awaited in the projection. When none runs, ``inline=True`` runs the pipeline in this
process for the duration of the call; otherwise :class:`NoServer` says what to do.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from consumers.components.brake import Brake
from consumers.components.watchdog import probe_requests
from consumers.eventlog.codec import encode
from consumers.operations.backends import Backends
from consumers.operations.braking import brake_status, end_brake
from consumers.operations.deliveries import list_deliveries, retry_deliveries
from consumers.operations.freshness import Freshness
from consumers.operations.orphans import list_orphans, orphan_history, terminate_orphans
from consumers.operations.outcomes import Outcome, Summary, await_outcomes
from consumers.operations.publishing import refuse_conflicts
from consumers.operations.sweeping import sweep
from consumers.runtime.names import PIPELINE
from consumers.workflows.client import WorkflowsClient
from consumers.workflows.ratelimit import FLOOR_KEPT, ON_DEMAND, SHARE_SPENT, SharedRateLimit
from projections.row import AuditRow
from statemachine.errors import ConfigError, NoServer, NotFound
from statemachine.events import AuditEvent, Trigger
from statemachine.explain import Step, explain
from statemachine.machine import RUNNING

__all__ = ["Operations", "StatusResult"]

PUBLISHED_MEMORY = 10_000

log = structlog.get_logger("auditrec")


@dataclass
class StatusResult:
    row: AuditRow
    probed: bool
    outcome: Outcome | None = None
    note: str | None = None


class Operations:
    def __init__(
        self, backends: Backends, *, run_pipeline: Callable[[float], Awaitable[None]] | None = None
    ) -> None:
        """``run_pipeline(timeout)`` runs probe → reconciler → projector in this process until
        drained (``inline=True``); without it, inline requests are refused."""
        self.backends = backends
        self._run_pipeline = run_pipeline
        self._inflight: dict[str, asyncio.Task[StatusResult]] = {}
        self._requested: dict[str, float] = {}
        # Read-your-writes: the last event this process published per audit, so a read that
        # follows a publish waits (bounded) for the projection to have it.
        self._published: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self.freshness = Freshness(backends.log, backends.store)
        self._budget: SharedRateLimit | None = None

    # -- publish ----------------------------------------------------------------------------

    async def refuse_conflicts(self, events: Sequence[AuditEvent]) -> None:
        """Refuse (:class:`~statemachine.errors.EventIdConflict`) events whose
        ``(audit_id, event_id)`` the history already holds with other content
        (:func:`consumers.operations.publishing.refuse_conflicts`)."""
        await refuse_conflicts(self.backends.store.audits, events)

    async def publish(self, events: Sequence[AuditEvent]) -> list[str]:
        topic = self.backends.topics.lifecycle
        await self.backends.log.append([encode(topic, e) for e in events])
        now = time.monotonic()
        for event in events:
            self._published[event.audit_id] = (str(event.event_id), now)
            self._published.move_to_end(event.audit_id)
        while len(self._published) > PUBLISHED_MEMORY:
            self._published.popitem(last=False)
        return [str(e.event_id) for e in events]

    async def await_own_writes(self, audit_id: str) -> None:
        """Wait (up to ``ON_DEMAND_WAIT``) until the projection has the last event this process
        published for ``audit_id``, so a read that follows a publish sees it."""
        entry = self._published.get(audit_id)
        if entry is None:
            return
        event_id, at = entry
        wait = self.backends.settings.on_demand_wait.total_seconds()
        deadline = time.monotonic() + wait
        if time.monotonic() - at > max(wait, 60.0):
            del self._published[audit_id]
            return
        while time.monotonic() < deadline:
            history = await self.backends.store.audits.history(audit_id)
            if any(str(h.event.event_id) == event_id for h in history):
                self._published.pop(audit_id, None)
                return
            await self.backends.store.audits.changed(
                min(max(deadline - time.monotonic(), 0.0), 0.05)
            )

    # -- pipeline liveness --------------------------------------------------------------------

    async def pipeline_live(self, *, reuse: bool = False) -> bool:
        """Whether a serve runs the whole pipeline; ``reuse``: a yes of the last second will
        do, a no is asked again (it may predate a serve that has just started)."""
        live = await self.backends.live_components(reuse=reuse)
        if reuse and not all(name in live for name in PIPELINE):
            live = await self.backends.live_components()
        return all(name in live for name in PIPELINE)

    async def missing(self) -> list[str]:
        live = await self.backends.live_components()
        return [name for name in PIPELINE if name not in live]

    async def run_inline(self) -> None:
        if self._run_pipeline is None:
            raise NoServer("this process cannot run the pipeline in-process")
        await self._run_pipeline(max(30.0, self.backends.settings.sweep_wait.total_seconds()))

    # -- status -----------------------------------------------------------------------------

    async def status(
        self, audit_id: str, *, probe: bool = True, inline: bool = False
    ) -> StatusResult:
        """The audit's row; a running audit not observed lately is probed first and the row
        given once the reconciler's outcome is in the projection, unless status reads have
        spent their share of the probe budget (then the row as it is, ``probed=False``).

        A read of a terminal audit, or without probing, is one indexed query: no liveness
        query, no freshness wait (unless this process just published for the audit). The
        probed path needs no freshness wait either: its observation follows, in the audit's
        partition, everything published before it, and the projector applies a partition in
        order, so once the outcome is in the table, so is what came before."""
        await self.await_own_writes(audit_id)
        row = await self.backends.store.audits.get(audit_id)
        if row is None and "projector" in await self.backends.live_components(reuse=True):
            # Perhaps just published by another service: once the projection caught up.
            await self.freshness.wait(self.backends.settings.on_demand_wait.total_seconds())
            row = await self.backends.store.audits.get(audit_id)
        if row is None:
            raise NotFound(f"unknown audit {audit_id!r}")
        if not probe or row.status != RUNNING:
            return StatusResult(row, probed=False)
        task = self._inflight.get(audit_id)
        if task is not None:  # a probe of this audit is under way: share its outcome
            return await asyncio.shield(task)
        s = self.backends.settings
        now = self.backends.now()
        interval = s.on_demand_min_interval.total_seconds()
        last = row.state.last_observed_at
        self._forget_requests_older_than(interval)
        recent = self._requested.get(audit_id)
        if (last is not None and (now - last).total_seconds() < interval) or recent is not None:
            return StatusResult(row, probed=False, note="observed recently; not probed again")
        # (An audit without an instance is observed without a request: it spends nothing.)
        attached = row.state.workflow_instance_id is not None
        if attached and await self._reads_budget().share_left(ON_DEMAND) == 0:
            return StatusResult(row, probed=False, note=self._share_spent_note())
        task = self._inflight.get(audit_id)
        if task is not None:  # another read started one while the budget was asked
            return await asyncio.shield(task)
        task = asyncio.create_task(self._probe_now(row, inline))
        self._inflight[audit_id] = task
        task.add_done_callback(lambda t: self._probed(audit_id, t))
        return await asyncio.shield(task)

    def _reads_budget(self) -> SharedRateLimit:
        if self._budget is None:
            self._budget = self.backends.rate_limit()
        return self._budget

    def _share_spent_note(self) -> str:
        s = self.backends.settings
        return (
            "not probed: status reads have spent their share of the probe budget "
            f"(AUDITREC_ON_DEMAND_BUDGET_SHARE={s.on_demand_budget_share:g} of "
            f"AUDITREC_PROBE_BUDGET={s.probe_budget} requests per window, at most "
            f"{s.on_demand_cap()} beside the watchdog's floor, AUDITREC_WATCHDOG_BUDGET_FLOOR="
            f"{s.watchdog_budget_floor:g}; the rest is the watchdog's and others'); answered "
            "from the table"
        )

    def _probed(self, audit_id: str, task: asyncio.Task[StatusResult]) -> None:
        self._inflight.pop(audit_id, None)
        if not task.cancelled() and task.exception() is not None:
            # Its readers were told (the shield passes the error on); with none left (they
            # were cut by a shutdown) this is where it ends.
            log.debug("on-demand probe ended with an error", audit_id=audit_id)

    def _forget_requests_older_than(self, interval: float) -> None:
        cutoff = time.monotonic() - interval
        for audit_id in [a for a, at in self._requested.items() if at < cutoff]:
            del self._requested[audit_id]

    async def probe(
        self,
        row: AuditRow,
        *,
        actor: str | None = None,
        on_behalf_of: str | None = None,
        inline: bool = False,
    ) -> StatusResult:
        """Probe a running audit now, whenever it was last observed (an operator's ``manual``
        probe, asked by ``actor`` for ``on_behalf_of``), and wait for the outcome as a status
        read does."""
        return await self._probe_now(row, inline, Trigger.MANUAL, actor, on_behalf_of)

    async def _probe_now(
        self,
        row: AuditRow,
        inline: bool,
        trigger: Trigger = Trigger.ON_DEMAND,
        actor: str | None = None,
        on_behalf_of: str | None = None,
    ) -> StatusResult:
        live = await self.pipeline_live(reuse=True)
        if not live and not inline:
            missing = ", ".join(await self.missing())
            return StatusResult(
                row,
                probed=False,
                note=f"not reconciled: no running `auditrec serve` runs {missing}",
            )
        wait = self.backends.settings.on_demand_wait.total_seconds()
        now = self.backends.now()
        request = probe_requests(
            [row],
            trigger,
            now,
            producer="auditrec-api",
            answer_by=now + self.backends.settings.on_demand_wait,
            actor=actor,
            on_behalf_of=on_behalf_of,
        )
        self._requested[row.audit_id] = time.monotonic()
        await self.backends.log.append(
            [encode(self.backends.topics.probe_requests, r) for r in request]
        )
        if not live:
            await self.run_inline()
            wait = 1.0
        watch = self.watching("this read", None) if live else None
        [outcome] = await await_outcomes(
            self.backends.store, request, self.backends.policy, timeout=wait, watch=watch
        )
        fresh = await self.backends.store.audits.get(row.audit_id) or row
        reason = outcome.reason or ""
        if trigger == Trigger.ON_DEMAND and (SHARE_SPENT in reason or FLOOR_KEPT in reason):
            # Another read took the share's last slot first, or other spenders took all but the
            # watchdog's floor: nothing was sent.
            return StatusResult(fresh, probed=False, outcome=outcome, note=self._share_spent_note())
        note = None
        if outcome.result == "pending":
            note = f"probe requested; outcome not in within {wait:g}s"
        elif not live:
            note = "reconciled in this process (no running `auditrec serve`)"
        return StatusResult(fresh, probed=True, outcome=outcome, note=note)

    # -- sweep ------------------------------------------------------------------------------

    def watching(
        self, what: str, progress: Callable[[int, int], None] | None
    ) -> Callable[[int, int], Awaitable[None]]:
        """A watch for :func:`await_outcomes`: reports progress, and raises :class:`NoServer`
        when the serve running the pipeline goes away while ``what`` waits on it."""

        async def watch(done: int, total: int) -> None:
            if progress is not None:
                progress(done, total)
            live = await self.backends.live_components()
            missing = [name for name in PIPELINE if name not in live]
            if missing:
                raise NoServer(
                    f"the `auditrec serve` running {', '.join(missing)} went away while {what} "
                    f"waited: {done} of {total} outcome(s) in; start it again (the requests "
                    "are kept and answered then)"
                )

        return watch

    async def sweep(
        self,
        *,
        dry_run: bool = False,
        inline: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> Summary:
        """One watchdog tick now, its outcomes awaited (:mod:`consumers.operations.sweeping`)."""
        return await sweep(self, dry_run=dry_run, inline=inline, progress=progress)

    # -- the mass-failure brake ----------------------------------------------------------------

    def brake(self) -> Brake:
        return Brake(
            self.backends.log,
            self.backends.store,
            self.backends.policy,
            owner=self.backends.process_id,
        )

    async def brake_status(self, limit: int = 100) -> dict[str, Any]:
        return await brake_status(self.brake(), limit)

    async def end_brake(
        self, how: str, actor: str, reason: str | None, *, dry_run: bool = False
    ) -> dict[str, Any]:
        return await end_brake(self.brake(), how, actor, reason, dry_run=dry_run)

    # -- the outcome feed's parked deliveries ---------------------------------------------------

    async def deliveries(
        self, endpoint: str | None = None, limit: int = 100, after: int = 0
    ) -> dict[str, Any]:
        b = self.backends
        return await list_deliveries(
            b.store, b.settings, endpoint=endpoint, limit=limit, after=after
        )

    async def retry_deliveries(
        self,
        outcome_ids: Sequence[str] | None,
        endpoint: str | None,
        actor: str,
        *,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        b = self.backends
        return await retry_deliveries(
            b.store,
            b.settings,
            outcome_ids=outcome_ids,
            endpoint=endpoint,
            actor=actor,
            dry_run=dry_run,
        )

    # -- orphans ------------------------------------------------------------------------------

    async def orphans(
        self,
        workflow: str | None = None,
        state: str | None = "open",
        limit: int = 100,
        after: int = 0,
    ) -> dict[str, Any]:
        b = self.backends
        return await list_orphans(
            b.store, b.settings, workflow=workflow, state=state, limit=limit, after=after
        )

    async def orphan(self, workflow: str, instance_id: str) -> dict[str, Any]:
        return await orphan_history(
            self.backends.store, self.backends.settings, workflow, instance_id
        )

    async def terminate_orphans(
        self,
        targets: Sequence[tuple[str, str]] | None,
        workflow: str | None,
        actor: str,
        on_behalf_of: str | None = None,
        *,
        dry_run: bool = False,
        strict: bool = False,
    ) -> dict[str, Any]:
        b = self.backends

        async def client() -> WorkflowsClient:
            blind = b.settings.probing_blind()
            if blind is not None:
                raise ConfigError(f"orphans terminate: {blind}")
            return await b.client()

        return await terminate_orphans(
            b.store,
            b.settings,
            client,
            targets=targets,
            workflow=workflow,
            actor=actor,
            on_behalf_of=on_behalf_of,
            dry_run=dry_run,
            strict=strict,
        )

    # -- replay -----------------------------------------------------------------------------

    async def replay(self, audit_id: str) -> list[Step]:
        history = await self.backends.store.audits.history(audit_id)
        if not history:
            raise NotFound(f"unknown audit {audit_id!r}")
        return explain([h.event for h in history], self.backends.policy)

    def explain_dicts(self, steps: list[Step]) -> list[dict[str, Any]]:
        return [step.as_dict() for step in steps]
