"""Hostile but plausible input: envelopes that are valid, at the boundaries, or broken in the
ways a careless or hostile publisher breaks them (huge numbers, deep nesting, long strings,
odd Unicode, NUL bytes, timestamps at the edges, wrong types), and raw bytes.

``envelopes()`` is a hypothesis strategy of JSON-ready envelopes; ``records(rng, n)`` draws a
reproducible list of raw record values from a seeded ``random.Random`` for the consumer runs.
"""

from __future__ import annotations

import json
import random
import uuid
from typing import Any

from hypothesis import strategies as st

__all__ = ["FUZZ_EXAMPLES", "envelopes", "records"]

import os

# Examples per fuzz target: a short deterministic profile in `make test`, more in `make fuzz`.
FUZZ_EXAMPLES = int(os.environ.get("AUDITREC_FUZZ_EXAMPLES", "150"))

KINDS = [
    "AuditStarted",
    "WorkflowInstanceAttached",
    "AuditProgressed",
    "AuditCompleted",
    "AuditFailed",
    "WorkflowStatusObserved",
    "WorkflowProbeFailed",
    "AuditFailureSimulated",
    "AuditRestored",
    "ProbeRequested",
    "NoSuchEvent",
]
EDGE_TIMES = [
    "2026-11-30T08:00:00Z",
    "1900-01-01T00:00:00+00:00",
    "8999-12-31T23:59:59Z",
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59+14:00",
    "2026-11-30T08:00:00",  # naive
    "not a time",
]
HOSTILE_TEXT = st.one_of(
    st.text(max_size=40),
    st.just("a\x00b"),
    st.just("\ud800"),
    st.just("é" * 3000),
    st.just("x" * 70_000),
    st.sampled_from(["", " ", "🦄", "\u202e", "\ufeff"]),
)
NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 2**53 - 1, 2**53, 2**63, -1]),
    st.floats(allow_nan=True, allow_infinity=True),
)
LEAVES = st.one_of(st.none(), st.booleans(), NUMBERS, HOSTILE_TEXT)
JSON = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = {"k": value}
    return value


@st.composite
def _data(draw: st.DrawFn) -> dict[str, Any]:
    """A data payload: mostly plausible fields with hostile values, sometimes junk."""
    fields = {
        "project_id": HOSTILE_TEXT,
        "workflow_instance_id": HOSTILE_TEXT,
        "pages_total": NUMBERS,
        "pages_crawled": NUMBERS,
        "current_phase": HOSTILE_TEXT,
        "error_code": st.sampled_from(["oom", "instance_lost", "nope"]),
        "error_detail": HOSTILE_TEXT,
        "failed_by": st.sampled_from(["workflow", "operator", "reconciler", "x"]),
        "status": st.sampled_from(["running", "errored", "not_found", "weird"]),
        "error": st.one_of(JSON, st.just(_deep(200))),
        "trigger": st.sampled_from(["watchdog", "on_demand", "manual", 7]),
        "observed_at": st.sampled_from(EDGE_TIMES),
        "reason": st.sampled_from(["timeout", "unauthorized", "bogus"]),
        "detail": HOSTILE_TEXT,
        "http_status": NUMBERS,
        "policy": st.one_of(JSON, st.just(_deep(50))),
        "unknown_field": JSON,
    }
    chosen = draw(st.lists(st.sampled_from(sorted(fields)), unique=True, max_size=6))
    return {name: draw(fields[name]) for name in chosen}


@st.composite
def envelopes(draw: st.DrawFn) -> Any:
    """An envelope as a publisher might send it (JSON-ready; may not be an object at all)."""
    if draw(st.integers(0, 20)) == 0:
        return draw(JSON)  # not an envelope
    if draw(st.integers(0, 2)) == 0:  # a valid event, one field perhaps made hostile
        rng = draw(st.randoms(use_true_random=False))
        valid = _valid(rng, draw(st.sampled_from(["a-1", "a-2"])), "2026-11-30T08:00:00Z", "wf-1")
        if draw(st.booleans()):
            field = draw(st.sampled_from(sorted(valid["data"])))
            valid["data"][field] = draw(LEAVES)
        return valid
    raw: dict[str, Any] = {
        "type": draw(st.sampled_from(KINDS)),
        "audit_id": draw(st.one_of(st.sampled_from(["a-1", "a-2", "a.3:x"]), HOSTILE_TEXT)),
        "data": draw(_data()),
    }
    if draw(st.booleans()):
        raw["occurred_at"] = draw(st.sampled_from(EDGE_TIMES))
    if draw(st.booleans()):
        raw["event_id"] = draw(st.one_of(st.just(str(uuid.uuid4())), HOSTILE_TEXT))
    if draw(st.booleans()):
        raw["schema_version"] = draw(st.one_of(NUMBERS, st.just("1")))
    if draw(st.integers(0, 5)) == 0:
        raw[draw(st.text(min_size=1, max_size=5))] = draw(JSON)
    return raw


def _valid(rng: random.Random, audit: str, at: str, instance: str) -> dict[str, Any]:
    kind = rng.choice(["start", "progress", "complete", "fail", "observe", "probe_failed"])
    base = {"event_id": str(uuid.UUID(int=rng.getrandbits(128))), "audit_id": audit,
            "occurred_at": at, "producer": "fuzz", "schema_version": 1}  # fmt: skip
    if kind == "start":
        data = {"project_id": "p", "workflow_instance_id": instance, "started_at": at}
        return {**base, "type": "AuditStarted", "data": data}
    if kind == "progress":
        data = {"pages_crawled": rng.randint(0, 2**53 - 1), "current_phase": "crawl"}
        return {**base, "type": "AuditProgressed", "data": data}
    if kind == "complete":
        return {**base, "type": "AuditCompleted", "data": {"pages_crawled": 3}}
    if kind == "fail":
        data = {"error_code": "oom", "error_detail": "é\u202e🦄", "failed_by": "workflow"}
        return {**base, "type": "AuditFailed", "schema_version": 2, "data": data}
    if kind == "observe":
        data = {"workflow_instance_id": instance, "trigger": "watchdog", "observed_at": at,
                "status": rng.choice(["running", "errored", "not_found", "complete"]),
                "error": {"name": "Error", "message": "x" * 1999}}  # fmt: skip
        return {**base, "type": "WorkflowStatusObserved", "data": data}
    data = {"workflow_instance_id": instance, "trigger": "on_demand", "observed_at": at,
            "reason": "timeout", "detail": "d", "http_status": 599}  # fmt: skip
    return {**base, "type": "WorkflowProbeFailed", "data": data}


def _mutate(rng: random.Random, envelope: dict[str, Any]) -> bytes:
    choice = rng.randrange(9)
    data = dict(envelope["data"])
    if choice == 0:
        data["pages_total"] = 2**70
    elif choice == 1:
        data["project_id"] = "p\x00"
    elif choice == 2:  # nested deeper than any JSON library recurses
        deep = '{"k":' * 100_000 + "1" + "}" * 100_000
        return json.dumps({**envelope, "data": "@"}).replace('"@"', deep).encode()
    elif choice == 3:
        data["start_url"] = "u" * 300_000
    elif choice == 4:
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64)))
    elif choice == 5:
        return b'{"type": "AuditStarted", "audit_id": "a-1", "data": {"project_id": "\\ud800"}}'
    elif choice == 6:
        return json.dumps({**envelope, "occurred_at": "9999-12-31T23:59:59+14:00"}).encode()
    elif choice == 7:
        return json.dumps([envelope]).encode()
    else:
        data["policy"] = {"nested": {"too": ["deep"]}}
    return json.dumps({**envelope, "data": data}).encode()


def records(rng: random.Random, n: int) -> list[tuple[str, bytes]]:
    """``n`` record values (key, bytes) for the lifecycle topic: about half valid events of a
    few audits in a plausible order, the rest hostile."""
    out: list[tuple[str, bytes]] = []
    for i in range(n):
        audit = f"fz-{rng.randrange(8)}"
        at = f"2026-11-30T08:{i // 60 % 60:02d}:{i % 60:02d}Z"
        envelope = _valid(rng, audit, at, f"wf-{audit}")
        if rng.random() < 0.5:
            out.append((audit, json.dumps(envelope).encode()))
        else:
            out.append((audit, _mutate(rng, envelope)))
    return out
