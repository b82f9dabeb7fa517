"""Operator actions: fail a running audit, restore a failure auditrec made, probe an audit now
— one audit at a time or over a filter. The CLI (``auditrec fail|restore|probe``), the HTTP API
(``POST /audits/{id}/fail|restore|probe``, ``POST /audits/fail|restore``) and the console all
call :class:`Actions`.

Every action is an event in the lifecycle log that names who authenticated (``actor``):
``token:<name>`` over HTTP, ``anonymous`` on an API without tokens, ``cli:<os user>`` on the
command line; the person they acted for, when named (``--operator``, a body's
``on_behalf_of``), is recorded beside it as ``on_behalf_of``, never instead of it. Whether an
action applies is the transition table's call on the audit as the projection has it (the events
and their rules: ``action_events.py``):

- **fail** appends ``AuditFailed`` to a ``running`` audit;
- **restore** appends ``AuditRestored`` to a ``failed`` audit whose failure the reconciler or
  an operator made (a workflow's own failure is never undone);
- **probe** asks the Workflows API about a ``running`` audit now (trigger ``manual``) and
  answers with the reconciler's outcome, as a status read does.

``dry_run`` says what would happen and publishes nothing. Bulk forms (:meth:`Actions.fail_many`,
:meth:`Actions.restore_many`) select with the listing's filter
(:class:`~consumers.operations.listing.AuditFilter`), skip (and name) the audits an action does
not apply to, and publish the rest in one append. Refusals are errors: :class:`NotFound` (404),
:class:`WrongState` (409), :class:`InvalidInput` (422).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final, Literal

import structlog

from consumers.operations.action_events import (
    PRODUCER,
    check_restorable,
    operator_failure,
    restoration,
)
from consumers.operations.action_input import check_code, check_reason
from consumers.operations.freshness import wait_for_projection
from consumers.operations.listing import AuditFilter, matching
from consumers.operations.service import Operations
from consumers.runtime.metrics import OPERATOR_ACTIONS
from projections.row import AuditRow
from statemachine.errors import NoServer, NotFound, WrongState
from statemachine.events import AuditEvent, AuditFailed, AuditRestored
from statemachine.machine import RUNNING
from statemachine.state import evolve

__all__ = ["PRODUCER", "ActionResult", "Actions", "BulkResult"]

log = structlog.get_logger("auditrec.actions")

BULK_LIMIT: Final = 10_000  # audits one bulk action looks at

Action = Literal["fail", "restore", "probe"]


@dataclass(frozen=True, slots=True)
class ActionResult:
    """What an action did (or, ``dry_run``, would do) to one audit."""

    audit_id: str
    action: Action
    dry_run: bool
    before: str  # status before
    after: str  # status after (as the transition table has it)
    event_id: str | None  # the event published (None: dry run, or probe)
    actor: str
    message: str
    outcome: dict[str, Any] | None = None  # a probe's outcome
    on_behalf_of: str | None = None  # the person the actor acted for, when named

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class BulkResult:
    """A bulk action: the audits it touched (or would), and those it skipped, with why."""

    action: Action
    dry_run: bool
    matched: int
    results: list[ActionResult] = field(default_factory=list)
    skipped: list[ActionResult] = field(default_factory=list)
    truncated: bool = False  # more audits matched than one bulk action looks at

    def as_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "dry_run": self.dry_run,
            "matched": self.matched,
            "acted": len(self.results),
            "truncated": self.truncated,
            "results": [r.as_dict() for r in self.results],
            "skipped": [r.as_dict() for r in self.skipped],
        }


class Actions:
    """Operator actions by ``actor`` (who authenticated: ``token:<name>``, ``anonymous``,
    ``cli:<user>``), for ``on_behalf_of`` when a person is named."""

    def __init__(self, ops: Operations, actor: str, on_behalf_of: str | None = None) -> None:
        self.ops = ops
        self.backends = ops.backends
        self.actor = check_reason(actor, "actor", 200)
        self.on_behalf_of = (
            check_reason(on_behalf_of, "on_behalf_of", 200) if on_behalf_of is not None else None
        )

    # -- one audit ----------------------------------------------------------------------------

    async def fail(
        self, audit_id: str, code: str, reason: str, *, dry_run: bool = False
    ) -> ActionResult:
        """Fail a running audit with ``code`` (an error code) for ``reason``."""
        row = await self._row(audit_id)
        return (await self._apply("fail", [(row, self._failure(row, code, reason))], dry_run))[0]

    async def restore(self, audit_id: str, reason: str, *, dry_run: bool = False) -> ActionResult:
        """Undo the failure of a failed audit (by the reconciler or an operator)."""
        row = await self._row(audit_id)
        event = await self._restoration(row, check_reason(reason))
        return (await self._apply("restore", [(row, event)], dry_run))[0]

    async def probe(self, audit_id: str, *, inline: bool = False) -> ActionResult:
        """Probe a running audit now; the answer carries the reconciler's outcome."""
        row = await self._row(audit_id)
        if row.status != RUNNING:
            raise WrongState(f"audit {audit_id!r} is {row.status}: only a running audit is probed")
        result = await self.ops.probe(
            row, actor=self.actor, on_behalf_of=self.on_behalf_of, inline=inline
        )
        OPERATOR_ACTIONS.labels("probe", self.actor).inc()
        if not result.probed:
            raise NoServer(result.note or "not probed: no running `auditrec serve`")
        outcome = result.outcome.as_dict() if result.outcome is not None else None
        message = (result.outcome.reason if result.outcome else None) or result.note or ""
        return ActionResult(
            audit_id,
            "probe",
            False,
            row.status,
            result.row.status,
            None,
            self.actor,
            message,
            outcome,
            self.on_behalf_of,
        )

    # -- over a filter ------------------------------------------------------------------------

    async def fail_many(
        self, where: AuditFilter, code: str, reason: str, *, dry_run: bool = True
    ) -> BulkResult:
        """Fail every running audit ``where`` selects (``dry_run``: list them)."""
        code, reason = check_code(code), check_reason(reason)
        rows, truncated = await self._select(where)
        chosen: list[tuple[AuditRow, AuditEvent]] = []
        skipped: list[ActionResult] = []
        for row in rows:
            try:
                chosen.append((row, self._failure(row, code, reason)))
            except WrongState as exc:
                skipped.append(self._skip("fail", row, str(exc), dry_run))
        results = await self._apply("fail", chosen, dry_run)
        return BulkResult("fail", dry_run, len(rows), results, skipped, truncated)

    async def restore_many(
        self, where: AuditFilter, reason: str, *, dry_run: bool = True
    ) -> BulkResult:
        """Restore every failure auditrec made among the audits ``where`` selects."""
        reason = check_reason(reason)
        rows, truncated = await self._select(where)
        chosen: list[tuple[AuditRow, AuditEvent]] = []
        skipped: list[ActionResult] = []
        for row in rows:
            try:
                chosen.append((row, await self._restoration(row, reason)))
            except WrongState as exc:
                skipped.append(self._skip("restore", row, str(exc), dry_run))
        results = await self._apply("restore", chosen, dry_run)
        return BulkResult("restore", dry_run, len(rows), results, skipped, truncated)

    # -- the events ---------------------------------------------------------------------------

    def _failure(self, row: AuditRow, code: str, reason: str) -> AuditFailed:
        return operator_failure(
            row, code, reason, self.actor, self.backends.now(), self.on_behalf_of
        )

    async def _restoration(self, row: AuditRow, reason: str) -> AuditRestored:
        check_restorable(row)  # before its history is read
        history = await self.backends.store.audits.history(row.audit_id)
        events = [h.event for h in history]
        now = self.backends.now()
        return restoration(row, events, reason, self.actor, now, self.on_behalf_of)

    # -- reading and publishing ---------------------------------------------------------------

    async def _caught_up(self) -> None:
        """With a projector running, the projection first takes in what the log holds (an
        action is judged on the audit as it is, not as it was a moment ago)."""
        if "projector" in await self.backends.live_components(reuse=True):
            await wait_for_projection(
                self.backends.log,
                self.backends.store,
                self.backends.settings.on_demand_wait.total_seconds(),
            )

    async def _row(self, audit_id: str) -> AuditRow:
        await self._caught_up()
        row = await self.backends.store.audits.get(audit_id)
        if row is None:
            raise NotFound(f"unknown audit {audit_id!r}")
        return row

    async def _select(self, where: AuditFilter) -> tuple[list[AuditRow], bool]:
        await self._caught_up()
        return await matching(self.backends.store.audits, where, self.backends.now(), BULK_LIMIT)

    async def _apply(
        self, action: Action, chosen: Sequence[tuple[AuditRow, AuditEvent]], dry_run: bool
    ) -> list[ActionResult]:
        if not dry_run and chosen:
            await self.ops.publish([event for _, event in chosen])
            OPERATOR_ACTIONS.labels(action, self.actor).inc(len(chosen))
            for row, event in chosen:
                log.info(
                    f"operator action: {action}",
                    audit_id=row.audit_id,
                    rule=f"operator_{action}",
                    actor=self.actor,
                    on_behalf_of=self.on_behalf_of,
                    event_id=str(event.event_id),
                )
        results = []
        for row, event in chosen:
            after = evolve(row.state, event).status
            verb = "would " + action if dry_run else action.removesuffix("e") + "ed"
            results.append(
                ActionResult(
                    row.audit_id,
                    action,
                    dry_run,
                    row.status,
                    after,
                    None if dry_run else str(event.event_id),
                    self.actor,
                    f"{verb} {row.audit_id}: {row.status} → {after}",
                    on_behalf_of=self.on_behalf_of,
                )
            )
        return results

    def _skip(self, action: Action, row: AuditRow, why: str, dry_run: bool) -> ActionResult:
        return ActionResult(
            row.audit_id,
            action,
            dry_run,
            row.status,
            row.status,
            None,
            self.actor,
            why,
            on_behalf_of=self.on_behalf_of,
        )
