"""The audits of a chaos run and the outcome each must end with.

Every audit started an hour ago, so the watchdog finds it stale at once; what the Workflows
simulator says about its instance decides its fate (DESIGN §4):

| kind | the simulator says | the crawler publishes | final status / error code |
|---|---|---|---|
| ``healthy`` | running | | running |
| ``completes`` | complete, ended just now | ``AuditCompleted`` a moment later | completed |
| ``overturned`` | errored (out of memory) | ``AuditCompleted`` once it failed | completed, overturned |
| ``oom``, ``cpu``, ``timeout``, ``reset`` | errored with the matching error | | failed / its code |
| ``terminated`` | terminated, no error | | failed / workflow_terminated |
| ``lost`` | nothing (404 instance not found) | | failed / instance_lost |
| ``unattached`` | (no instance id to ask about) | | failed / instance_lost |
| ``finalize_lost`` | complete, ended an hour ago | | failed / finalize_lost |

A ``completes`` audit's workflow ended within ``FINALIZE_GRACE``, so a probe before its
completion arrives changes nothing. Every failure is the reconciler's, reached through the
watchdog; an ``overturned`` audit is failed, then completes after all (its failure is still
reported to PostHog). Markers (:func:`markers`) are ``oom`` audits published after each fault, one on
each lifecycle partition, started earlier than any other so the watchdog takes them first:
the time until they are all failed is the time until the whole pipeline works again.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from consumers.eventlog.kafka.records import key_hash
from consumers.workflows.simulator.server import Simulator
from statemachine.events import EVENT_ADAPTER, AuditEvent
from statemachine.state import AuditState

__all__ = ["KINDS", "PRODUCER", "Audit", "Expected", "markers", "plan"]

PRODUCER = "chaos-crawler"


@dataclass(frozen=True)
class Expected:
    status: str
    error_code: str | None = None
    overturned: bool = False

    @property
    def decided(self) -> bool:
        """Whether the reconciler must fail the audit (once) on the way."""
        return self.status == "failed" or self.overturned

    def met_by(self, state: AuditState) -> bool:
        return (state.status, state.error_code, state.overturned) == (
            self.status,
            self.error_code,
            self.overturned,
        )


@dataclass(frozen=True)
class Kind:
    weight: int
    expected: Expected
    status: str | None = None  # what the simulator says; None: no instance
    error: dict[str, str | None] | None = None
    ended_ago: timedelta | None = None
    attached: bool = True
    # When the crawler reports completion: with the next chunk, or once the audit failed.
    completion: Literal["next", "after_failure"] | None = None


def _errored(name: str, message: str) -> dict[str, str | None]:
    return {"name": name, "message": message}


KINDS: dict[str, Kind] = {
    "healthy": Kind(17, Expected("running"), "running"),
    "completes": Kind(18, Expected("completed"), "complete", completion="next"),
    "overturned": Kind(
        5,
        Expected("completed", overturned=True),
        "errored",
        _errored("Error", "Worker exceeded memory limit."),
        completion="after_failure",
    ),
    "oom": Kind(
        12,
        Expected("failed", "oom"),
        "errored",
        _errored("Error", "Worker exceeded memory limit."),
    ),
    "cpu": Kind(
        5,
        Expected("failed", "cpu_limit"),
        "errored",
        _errored("Error", "Worker exceeded CPU time limit."),
    ),
    "timeout": Kind(
        8,
        Expected("failed", "step_timeout"),
        "errored",
        _errored("WorkflowTimeoutError", "Execution timed out after 900 seconds"),
    ),
    "reset": Kind(
        5,
        Expected("failed", "deploy_reset"),
        "errored",
        _errored("Error", "Durable Object reset because its code was updated."),
    ),
    "terminated": Kind(10, Expected("failed", "workflow_terminated"), "terminated"),
    "lost": Kind(8, Expected("failed", "instance_lost")),
    "unattached": Kind(4, Expected("failed", "instance_lost"), attached=False),
    "finalize_lost": Kind(
        8, Expected("failed", "finalize_lost"), "complete", ended_ago=timedelta(hours=1)
    ),
}


@dataclass(frozen=True)
class Audit:
    audit_id: str
    kind: str
    started_at: datetime
    user: str
    pages: int

    @property
    def expected(self) -> Expected:
        return KINDS[self.kind].expected

    @property
    def completion(self) -> str | None:
        return KINDS[self.kind].completion

    @property
    def instance_id(self) -> str | None:
        return f"wf-{self.audit_id}" if KINDS[self.kind].attached else None

    def seed(self, sim: Simulator) -> None:
        """Tell the simulator what this audit's workflow is doing (before it is published)."""
        kind = KINDS[self.kind]
        if kind.status is None or self.instance_id is None:
            return
        options: dict[str, Any] = {"error": kind.error}
        if kind.ended_ago is not None:
            end = datetime.now(UTC) - kind.ended_ago
            options.update(start=end - timedelta(minutes=5), end=end)
        sim.set_instance(self.instance_id, kind.status, **options)

    def opening(self, rng: random.Random) -> list[AuditEvent]:
        """``AuditStarted`` and one ``AuditProgressed``, as the crawler reports them."""
        started: dict[str, Any] = {
            "project_id": f"proj-{self.user}",
            "organization_id": "org-chaos",
            "started_by_user_id": self.user,
            "start_url": f"https://{self.audit_id}.example.com/",
            "started_at": self.started_at.isoformat(),
            "pages_total": 100,
        }
        if self.instance_id is not None:
            started["workflow_instance_id"] = self.instance_id
        return [
            _event(rng, "AuditStarted", self.audit_id, self.started_at, started),
            _event(
                rng,
                "AuditProgressed",
                self.audit_id,
                self.started_at + timedelta(minutes=2),
                {"current_phase": "crawl", "pages_crawled": self.pages},
            ),
        ]

    def closing(self, rng: random.Random) -> list[AuditEvent]:
        """The crawler's ``AuditCompleted``, for an audit that completes; else nothing."""
        if self.completion is None:
            return []
        now = datetime.now(UTC)
        data = {"pages_crawled": 100, "pages_total": 100, "completed_at": now.isoformat()}
        return [_event(rng, "AuditCompleted", self.audit_id, now, data)]


def _event(
    rng: random.Random, kind: str, audit_id: str, at: datetime, data: dict[str, Any]
) -> AuditEvent:
    return EVENT_ADAPTER.validate_python(
        {
            "event_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "type": kind,
            "audit_id": audit_id,
            "occurred_at": at.isoformat(),
            "producer": PRODUCER,
            "data": data,
        }
    )


def plan(count: int, rng: random.Random, now: datetime) -> list[Audit]:
    """``count`` audits of every kind in proportion to its weight, in a random order."""
    names = list(KINDS)
    weights = [KINDS[n].weight for n in names]
    total = sum(weights)
    kinds = [n for n, w in zip(names, weights, strict=True) for _ in range(count * w // total)]
    kinds += rng.choices(names, weights, k=count - len(kinds))
    rng.shuffle(kinds)
    return [
        Audit(
            audit_id=f"c-{i:05d}",
            kind=kind,
            started_at=now - timedelta(hours=1, seconds=rng.uniform(0, 600)),
            user=f"user-{rng.randrange(40):02d}",
            pages=rng.randrange(100),
        )
        for i, kind in enumerate(kinds)
    ]


def markers(fault: int, partitions: int, now: datetime) -> list[Audit]:
    """One ``oom`` audit on each lifecycle partition (Kafka's default partitioner), started
    before any planned audit so the watchdog selects them first."""
    found: dict[int, str] = {}
    n = 0
    while len(found) < partitions:
        audit_id = f"m-{fault:02d}-{n}"
        found.setdefault(key_hash(audit_id.encode()) % partitions, audit_id)
        n += 1
    started = now - timedelta(hours=2)
    return [Audit(found[p], "oom", started, "user-marker", 0) for p in sorted(found)]
