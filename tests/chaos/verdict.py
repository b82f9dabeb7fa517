"""The verdict of a chaos run: what the log, the table, a rebuild and PostHog show, against
the plan, as :class:`Figures`, and its summary.

- lost: a published audit missing from the ``audits`` table;
- wrong: an audit whose final status or error code is not the planned one (a failure must be
  the reconciler's, found by the watchdog);
- decisions: reconciler decisions (``AuditFailed`` with ``failed_by = "reconciler"``) per audit
  in the log, at most one;
- PostHog: one ``site_audit:complete`` per decision at the capture server, by uuid (as PostHog
  deduplicates), next to the raw deliveries (a crash between PostHog's answer and the record
  resends the same uuid);
- rebuild: the table equals ``auditrec rebuild`` of the log into a fresh database, and the pure
  fold of the log;
- recovery: after each SIGKILL, from the restart until every marker is in the table
  (projected) and until every marker is failed (decided).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from consumers.eventlog.codec import decode
from consumers.eventlog.factory import open_event_log
from consumers.eventlog.port import Topics
from consumers.runtime.settings import load_settings
from projections.factory import open_store
from projections.row import AuditRow, project
from statemachine.events import AuditEvent, AuditFailed, FailedBy
from tests.chaos.plan import PRODUCER, Audit
from tests.chaos.profile import RECOVERY_TARGET

__all__ = [
    "KILLS",
    "Figures",
    "Recovery",
    "decisions",
    "differences",
    "fold",
    "judge",
    "p90",
    "projector_lag",
    "read_log",
    "same_rows",
    "table",
]

KILLS = ("kill", "crashloop")  # a crash loop: killed again while it starts


@dataclass(frozen=True)
class Recovery:
    """How long after a fault the pipeline worked again, in seconds."""

    fault: str
    projected: float  # every marker in the table
    decided: float  # every marker failed


@dataclass
class Figures:
    audits: int = 0
    markers: int = 0
    events_published: int = 0
    kills: int = 0
    crashloops: int = 0
    kills_in_outages: int = 0  # while the broker or the database restarted
    restarts: dict[str, float] = field(default_factory=dict)  # service → seconds down
    restarts_skipped: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)  # serve runs that ended on their own
    settled: bool = False
    outcomes: Counter[str] = field(default_factory=Counter)  # final status (and code)
    lost: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    decisions: int = 0
    max_decisions: int = 0
    decided_twice: list[str] = field(default_factory=list)
    posthog_distinct: int = 0
    posthog_raw: int = 0
    posthog_missing: list[str] = field(default_factory=list)
    posthog_unexpected: list[str] = field(default_factory=list)
    rebuild_equal: bool = False
    rebuild_differing: list[str] = field(default_factory=list)
    fold_equal: bool = False
    duplicate_events: int = 0  # derived events (the service's) appearing twice in the log
    dead_letters: int = 0
    log_events: int = 0
    stop_codes: list[int] = field(default_factory=list)
    lag_at_stop: int = 0  # lifecycle offsets not projected when both processes had stopped
    recoveries: list[Recovery] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)  # long: written to a file

    def kill_recoveries(self, which: str) -> list[float]:
        return [getattr(r, which) for r in self.recoveries if r.fault in KILLS]

    def summary(self, title: str) -> str:
        def stats(values: list[float]) -> str:
            if not values:
                return "n/a"
            return (
                f"median {statistics.median(values):.1f}s, p90 {p90(values):.1f}s, "
                f"max {max(values):.1f}s (n={len(values)})"
            )

        decided = self.kill_recoveries("decided")
        verdict = "within" if decided and p90(decided) <= RECOVERY_TARGET else "OVER"
        restarts = ", ".join(f"{s} (down {t:.1f}s)" for s, t in self.restarts.items()) or "none"
        if self.restarts_skipped:
            restarts += "; not restarted: " + ", ".join(self.restarts_skipped)
        lines = [
            f"=== chaos: {title}",
            f"audits            {self.audits} planned + {self.markers} markers; "
            f"{self.events_published} events published; {self.log_events} events in the log",
            f"kills             {self.kills} SIGKILLs, each restarted at once under its identity "
            f"({2 * self.crashloops} of them in {self.crashloops} crash loops: killed again "
            f"while starting; {self.kills_in_outages} during a service restart)",
            f"restarts          {restarts}",
            f"crashes           {len(self.crashes)}" + _examples(self.crashes),
            f"settled           {'yes' if self.settled else 'NO (timed out waiting)'}",
            "outcomes          " + ", ".join(f"{k} {n}" for k, n in sorted(self.outcomes.items())),
            f"lost              {len(self.lost)}" + _examples(self.lost),
            f"wrong outcomes    {len(self.wrong)}" + _examples(self.wrong),
            f"decisions         {self.decisions} (max per audit {self.max_decisions}; "
            f"decided twice: {len(self.decided_twice)}{_examples(self.decided_twice)})",
            f"PostHog           {self.posthog_distinct} distinct events for {self.decisions} "
            f"reconciler failures; {self.posthog_raw} raw deliveries; missing "
            f"{len(self.posthog_missing)}, unexpected {len(self.posthog_unexpected)}",
            f"rebuild equal     {'yes' if self.rebuild_equal else 'NO'}"
            + _examples(self.rebuild_differing)
            + f"; table = fold of the log: {'yes' if self.fold_equal else 'NO'}",
            f"log               {self.duplicate_events} duplicated derived events, "
            f"{self.dead_letters} dead letters",
            f"graceful stop     exit codes {self.stop_codes}; projector behind by "
            f"{self.lag_at_stop} offsets (appended while the other process stopped: "
            "`serve --until-idle` applied them before the comparisons)",
            f"recovery (kill)   decided: {stats(decided)} [target p90 <= "
            f"{RECOVERY_TARGET:g}s: {verdict}]",
            f"                  projected: {stats(self.kill_recoveries('projected'))}",
        ]
        for r in self.recoveries:
            if r.fault not in KILLS:
                lines.append(
                    f"recovery ({r.fault})  projected {r.projected:.1f}s, decided "
                    f"{r.decided:.1f}s after it was back"
                )
        lines.append(
            "durations         " + ", ".join(f"{k} {v:.1f}s" for k, v in self.seconds.items())
        )
        if self.details:
            lines.append(f"first difference  {self.details[0][:600]}")
        lines += [f"note              {n}" for n in self.notes]
        return "\n".join(lines)


def p90(values: list[float]) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=10, method="inclusive")[8]


def _examples(items: list[str], shown: int = 5) -> str:
    if not items:
        return ""
    more = f", … {len(items) - shown} more" if len(items) > shown else ""
    return " (" + ", ".join(items[:shown]) + more + ")"


async def read_log(event_log_url: str, database_url: str, prefix: str) -> dict[str, Any]:
    """The lifecycle topic as events, in partition order, and the dead letters' count."""
    topics = Topics(prefix)
    settings = load_settings(event_log_url=event_log_url, database_url=database_url)
    out: list[AuditEvent] = []
    dead = 0
    async with open_event_log(event_log_url, topics, settings=settings) as log:
        for p in await log.inspection.partitions(topics.lifecycle):
            async for batch in log.inspection.read(topics.lifecycle, p, 0, None):
                out.extend(decode(r.value) for r in batch)
        for p in await log.inspection.partitions(topics.dead_letter):
            async for batch in log.inspection.read(topics.dead_letter, p, 0, None):
                dead += len(batch)
    return {"events": out, "dead_letters": dead}


async def projector_lag(event_log_url: str, database_url: str, prefix: str) -> int:
    """Offsets of the lifecycle topic the projector has not applied (transaction markers
    occupy offsets too: an upper bound on the events)."""
    topics = Topics(prefix)
    settings = load_settings(event_log_url=event_log_url, database_url=database_url)
    async with (
        open_event_log(event_log_url, topics, settings=settings) as log,
        open_store(database_url) as store,
    ):
        ends = await log.inspection.end_offsets(topics.lifecycle)
        stored = await store.writer.stored_offsets(topics.group("projector"))
    return sum(end - stored.get((topics.lifecycle, p), 0) for p, end in ends.items())


async def table(database_url: str) -> dict[str, AuditRow]:
    async with open_store(database_url) as store:
        return {row.audit_id: row async for row in store.audits.iter_rows()}


def decisions(events: Iterable[AuditEvent]) -> list[AuditFailed]:
    return [
        e for e in events if isinstance(e, AuditFailed) and e.data.failed_by is FailedBy.RECONCILER
    ]


def fold(events: Iterable[AuditEvent]) -> dict[str, AuditRow]:
    rows: dict[str, AuditRow] = {}
    for e in events:
        rows[e.audit_id] = project(rows.get(e.audit_id), e)
    return {a: r for a, r in rows.items() if r.state.exists}


def same_rows(a: dict[str, AuditRow], b: dict[str, AuditRow]) -> list[str]:
    """The audits whose rows differ (``updated_at`` is the store's wall clock: not compared)."""

    def comparable(row: AuditRow | None) -> dict[str, Any] | None:
        if row is None:
            return None
        values = row.values()
        values.pop("updated_at")
        return values

    return sorted(x for x in set(a) | set(b) if comparable(a.get(x)) != comparable(b.get(x)))


def differences(
    audit_ids: list[str], ours: dict[str, AuditRow], theirs: dict[str, AuditRow], name: str
) -> list[str]:
    """For each audit, the columns whose values differ: the table's, then ``name``'s."""
    out = []
    for audit_id in audit_ids:
        a, b = ours.get(audit_id), theirs.get(audit_id)
        if a is None or b is None:
            out.append(f"{audit_id}: only in {'the table' if b is None else name}")
            continue
        va, vb = a.values(), b.values()
        cols = [c for c in va if c != "updated_at" and va[c] != vb[c]]
        out.append(
            f"{audit_id}: " + "; ".join(f"{c} table={va[c]!r} {name}={vb[c]!r}" for c in cols)
        )
    return out


def history(audit_id: str, events: Iterable[AuditEvent]) -> list[str]:
    """One audit's events in log order, one line each."""
    return [
        f"  {e.type} {e.event_id} at {e.occurred_at.isoformat()} by {e.producer} "
        f"caused by {e.causation_id}"
        for e in events
        if e.audit_id == audit_id
    ]


def judge(
    figures: Figures,
    audits: list[Audit],
    events: list[AuditEvent],
    rows: dict[str, AuditRow],
    delivered: list[dict[str, Any]],
) -> None:
    """Fill the figures that compare the plan with the log, the table and PostHog."""
    expected = {a.audit_id: a for a in audits}
    figures.lost = sorted(a for a in expected if a not in rows)
    for audit_id, audit in sorted(expected.items()):
        row = rows.get(audit_id)
        if row is None:
            continue
        s, want = row.state, audit.expected
        outcome = s.status if s.error_code is None else f"{s.status}/{s.error_code}"
        figures.outcomes[outcome + (" (overturned)" if s.overturned else "")] += 1
        ok = want.met_by(s)
        if want.status == "failed":
            ok = ok and s.failed_by == "reconciler" and s.reconciled_by == "watchdog"
        if not ok:
            figures.wrong.append(
                f"{audit_id} [{audit.kind}] {s.status}/{s.error_code} by {s.failed_by}"
                f"{' overturned' if s.overturned else ''}, expected "
                f"{want.status}/{want.error_code}{' overturned' if want.overturned else ''}"
            )
    decided = decisions(events)
    per_audit = Counter(d.audit_id for d in decided)
    figures.decisions = len(decided)
    figures.max_decisions = max(per_audit.values(), default=0)
    figures.decided_twice = sorted(a for a, n in per_audit.items() if n > 1)
    figures.wrong += sorted(
        f"{a} [{expected[a].kind}] decided by the reconciler"
        for a in per_audit
        if a in expected and not expected[a].expected.decided
    )
    figures.wrong += sorted(
        f"{a} [{audit.kind}] never decided by the reconciler"
        for a, audit in expected.items()
        if audit.expected.decided and a not in per_audit
    )
    ids = Counter(str(e.event_id) for e in events if e.producer != PRODUCER)
    figures.duplicate_events = sum(1 for n in ids.values() if n > 1)
    figures.log_events = len(events)
    uuids = Counter(str(e.get("uuid")) for e in delivered)
    wanted = {str(d.event_id) for d in decided}
    figures.posthog_raw = len(delivered)
    figures.posthog_distinct = len(uuids)
    figures.posthog_missing = sorted(wanted - set(uuids))
    figures.posthog_unexpected = sorted(set(uuids) - wanted)
    folded = fold(events)
    differing = same_rows(rows, folded)
    figures.fold_equal = not differing
    for line in differences(differing, rows, folded, "fold"):
        figures.details.append(line)
        figures.details += history(line.split(":", 1)[0], events)
