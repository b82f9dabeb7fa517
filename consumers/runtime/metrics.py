"""Prometheus metrics, one registry per process (served at ``GET /metrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = [
    "BRAKE_ENGAGED",
    "CONSUMER_LAG",
    "DEAD_LETTERED",
    "DECISIONS",
    "DECISIONS_HELD",
    "EVENTS_PROJECTED",
    "OVERTURNED",
    "PROBES",
    "PROBE_BUDGET_LEFT",
    "REGISTRY",
    "SWEEP_DURATION",
    "TELEMETRY",
]

REGISTRY = CollectorRegistry(auto_describe=True)

DECISIONS = Counter(
    "auditrec_decisions",
    "Observations judged by the reconciler, by rule and error code.",
    ["rule", "error_code"],
    registry=REGISTRY,
)
PROBES = Counter(
    "auditrec_probes",
    "Workflow probes by outcome (observed status, or failure reason).",
    ["outcome"],
    registry=REGISTRY,
)
PROBE_BUDGET_LEFT = Gauge(
    "auditrec_probe_budget_left",
    "Workflows API requests left in the current budget window.",
    registry=REGISTRY,
)
COMPONENT_HEALTHY = Gauge(
    "auditrec_component_healthy",
    "1 while a component of this process is well; 0 while failing or stalled.",
    ["component"],
    registry=REGISTRY,
)
CONSUMER_LAG = Gauge(
    "auditrec_consumer_lag",
    "Records not yet consumed, per consumer group.",
    ["group"],
    registry=REGISTRY,
)
SWEEP_DURATION = Histogram(
    "auditrec_sweep_duration_seconds",
    "Duration of watchdog ticks, from selection to the last outcome.",
    buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300),
    registry=REGISTRY,
)
DEAD_LETTERED = Counter(
    "auditrec_dead_lettered",
    "Records sent to the dead-letter topic, per consumer group.",
    ["consumer"],
    registry=REGISTRY,
)
EVENTS_PROJECTED = Counter(
    "auditrec_events_projected",
    "Lifecycle events applied to the projection (skipped: already applied).",
    ["result"],
    registry=REGISTRY,
)
OVERTURNED = Counter(
    "auditrec_overturned",
    "Reconciler failures overturned by a later AuditCompleted.",
    registry=REGISTRY,
)
TELEMETRY = Counter(
    "auditrec_telemetry",
    "PostHog events by result (sent, retried, failed: given up, skipped: already sent).",
    ["result"],
    registry=REGISTRY,
)
BRAKE_ENGAGED = Gauge(
    "auditrec_brake_engaged",
    "1 while the mass-failure brake is engaged (instance_lost decisions are held).",
    registry=REGISTRY,
)
DECISIONS_HELD = Gauge(
    "auditrec_decisions_held",
    "Running audits whose failure is held by the mass-failure brake.",
    registry=REGISTRY,
)
