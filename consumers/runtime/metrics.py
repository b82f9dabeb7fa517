"""Prometheus metrics, one registry per process: served at ``GET /metrics`` by the API, or on
``AUDITREC_METRICS_PORT`` by a process that does not serve the API.

Names follow Prometheus' conventions: the unit in the name, counters end in ``_total`` (the
client adds it), timestamps in seconds since the epoch. The set, by who records it:

- watchdog: ticks (by result), tick duration, candidates and probe requests of the last tick
  (by source: asked alone, or seen in the instance listing), the last tick's time; audits by
  status, stale running audits, the oldest running audit's age (refreshed every 30 s); open
  orphans per workflow and the listing pages orphan scans requested;
- reconciler: decisions (by rule, error code, trigger and outcome: failed, held by the brake,
  shadow) and observations judged that changed nothing (by verdict); overturns;
- probe and the Workflows client: probe outcomes, each API request's latency (by outcome and
  HTTP status), the budget left, budget slots spent and refused (by spender: on_demand,
  watchdog, manual, other), 429 pauses;
- every consumer: lag and the last progress per partition, dead letters (by reason);
- API: requests and their latency by route and status; ``auditrec_build_info``;
- subscriber: queue messages (by event type and what became of them), pulls (by outcome),
  the queue's backlog, the age of the oldest message pulled and not yet acknowledged,
  confirmations waiting for the budget, and the time from a death the queue reported to the
  audit's ``failed`` row;
- outcome feed: entries per endpoint by result (delivered, retried, parked), entries waiting to
  be delivered and parked per endpoint, and the time from a decision to its delivery;
- the brake, telemetry, component health.
"""

from __future__ import annotations

import platform
from importlib import metadata

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

__all__ = [
    "AUDITS",
    "AUDITS_RETENTION_AT_RISK",
    "AUDITS_STALE_RUNNING",
    "AUDITS_STALLED",
    "BRAKE_ENGAGED",
    "BUILD",
    "COMPONENT_HEALTHY",
    "CONFIRMATIONS_WAITING",
    "CONSUMER_LAG",
    "CONSUMER_PROGRESS",
    "DEAD_LETTERED",
    "DEAD_LETTERS_KEPT",
    "DEAD_LETTERS_PURGED",
    "DECISIONS",
    "DECISIONS_HELD",
    "DETECTION_SECONDS",
    "EVENTS_PROJECTED",
    "HTTP_DURATION",
    "HTTP_REQUESTS",
    "INGESTED",
    "JUDGED",
    "OLDEST_RUNNING_AGE",
    "OPERATOR_ACTIONS",
    "ORPHANS",
    "ORPHAN_SCAN_PAGES",
    "OUTCOMES",
    "OUTCOMES_PARKED",
    "OUTCOMES_WAITING",
    "OUTCOME_DELAY",
    "OVERTURNED",
    "PROBES",
    "PROBE_BUDGET_LEFT",
    "PROBE_BUDGET_SLOTS",
    "PROBE_PAUSES",
    "PROBE_REQUEST_DURATION",
    "REGISTRY",
    "SUBSCRIPTION_BACKLOG",
    "SUBSCRIPTION_LAST_PULL",
    "SUBSCRIPTION_MESSAGES",
    "SUBSCRIPTION_OLDEST_UNACKED",
    "SUBSCRIPTION_PULLS",
    "SWEEP_DURATION",
    "TELEMETRY",
    "TERMINATIONS",
    "WATCHDOG_CANDIDATES",
    "WATCHDOG_LAST_TICK",
    "WATCHDOG_REQUESTS",
    "WATCHDOG_TICKS",
    "WATCHDOG_TICK_DURATION",
]

REGISTRY = CollectorRegistry(auto_describe=True)
_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

BUILD = Info("auditrec_build", "The running auditrec's version.", registry=REGISTRY)
try:
    _VERSION = metadata.version("auditrec")
except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
    _VERSION = "unknown"
BUILD.info({"version": _VERSION, "python": platform.python_version()})

# -- the reconciler -------------------------------------------------------------------------

DECISIONS = Counter(
    "auditrec_decisions",
    "Failures decided by the reconciler, by rule, error code, trigger and outcome (failed, "
    "held: by the mass-failure brake, shadow: would fail in shadow mode).",
    ["rule", "error_code", "trigger", "outcome"],
    registry=REGISTRY,
)
JUDGED = Counter(
    "auditrec_observations_judged",
    "Observations and probe failures the reconciler judged that changed nothing, by verdict "
    "(healthy, within_grace, finalize_pending, not_running, stale_instance, probe_failed, ...).",
    ["verdict"],
    registry=REGISTRY,
)
OPERATOR_ACTIONS = Counter(
    "auditrec_operator_actions",
    "Operator actions published (fail, restore) and manual probes, by action and by who "
    "authenticated (token:<name>, anonymous, cli:<os user>; never a name a body gives).",
    ["action", "actor"],
    registry=REGISTRY,
)
INGESTED = Counter(
    "auditrec_ingested_records",
    "Records of the ingest topic (Kafka publishers), by outcome: appended to the lifecycle "
    "log, refused (a type only auditrec writes) or invalid; both of these are dead-lettered.",
    ["outcome"],
    registry=REGISTRY,
)
OVERTURNED = Counter(
    "auditrec_overturned",
    "Reconciler failures overturned by a later AuditCompleted.",
    registry=REGISTRY,
)

# -- the probe and the Workflows API --------------------------------------------------------

STALL_CHECKS = Counter(
    "auditrec_stall_checks",
    "Audits the watchdog asked to be read with their steps for a stall (asked), or could not "
    "while the projection was behind the log (paused).",
    ["result"],
    registry=REGISTRY,
)
TERMINATIONS = Counter(
    "auditrec_terminations",
    "Instances of stalled audits auditrec asked the Workflows API to terminate, by outcome "
    "(terminated, already_ended, not_found, failed).",
    ["outcome"],
    registry=REGISTRY,
)
PROBES = Counter(
    "auditrec_probes",
    "Workflow probes by outcome (observed status, or failure reason).",
    ["outcome"],
    registry=REGISTRY,
)
PROBE_REQUEST_DURATION = Histogram(
    "auditrec_probe_request_duration_seconds",
    "Workflows API requests, by outcome (status, listed, or failure reason) and HTTP status.",
    ["outcome", "http_status"],
    buckets=_SECONDS,
    registry=REGISTRY,
)
PROBE_BUDGET_LEFT = Gauge(
    "auditrec_probe_budget_left",
    "Workflows API requests left in the current budget window.",
    registry=REGISTRY,
)
PROBE_BUDGET_SLOTS = Counter(
    "auditrec_probe_budget_slots",
    "Workflows API budget slots, by spender (on_demand: status reads; watchdog; manual; other) "
    "and result (spent, refused: the budget, the spender's share or a 429 pause held it back).",
    ["spender", "result"],
    registry=REGISTRY,
)
PROBE_PAUSES = Counter(
    "auditrec_probe_pauses",
    "429 answers that paused every Workflows API call.",
    registry=REGISTRY,
)

# -- the watchdog ---------------------------------------------------------------------------

WATCHDOG_TICKS = Counter(
    "auditrec_watchdog_ticks",
    "Watchdog ticks, by result (ticked, skipped: another process held the lock).",
    ["result"],
    registry=REGISTRY,
)
WATCHDOG_TICK_DURATION = Histogram(
    "auditrec_watchdog_tick_duration_seconds",
    "Duration of a watchdog tick: selection, the instance listing, and its probe requests.",
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60),
    registry=REGISTRY,
)
WATCHDOG_CANDIDATES = Gauge(
    "auditrec_watchdog_tick_candidates",
    "Stale running audits the last tick of this process looked at.",
    registry=REGISTRY,
)
WATCHDOG_REQUESTS = Counter(
    "auditrec_watchdog_probe_requests",
    "Probe requests made by watchdog ticks, by source (instance: asked alone; listing: found "
    "alive in the workflow's instance listing).",
    ["source"],
    registry=REGISTRY,
)
WATCHDOG_LAST_TICK = Gauge(
    "auditrec_watchdog_last_tick_timestamp_seconds",
    "When this process last ticked.",
    registry=REGISTRY,
)
SWEEP_DURATION = Histogram(
    "auditrec_sweep_duration_seconds",
    "Duration of sweeps asked for by the CLI or the API, from selection to the last outcome.",
    buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300),
    registry=REGISTRY,
)
AUDITS = Gauge(
    "auditrec_audits",
    "Audits in the projection, by status (refreshed every 30 s by each watchdog).",
    ["status"],
    registry=REGISTRY,
)
AUDITS_STALE_RUNNING = Gauge(
    "auditrec_audits_stale_running",
    "Running audits started more than STALE_RUNNING_AFTER ago (refreshed every 30 s).",
    registry=REGISTRY,
)
OLDEST_RUNNING_AGE = Gauge(
    "auditrec_oldest_running_age_seconds",
    "Age of the oldest running audit (0 when none runs; refreshed every 30 s).",
    registry=REGISTRY,
)
AUDITS_STALLED = Gauge(
    "auditrec_audits_stalled",
    "Running audits with a stall verdict recorded: no progress for AUDITREC_STALLED_AFTER "
    "while their instance runs (refreshed every 30 s).",
    registry=REGISTRY,
)
AUDITS_RETENTION_AT_RISK = Gauge(
    "auditrec_audits_retention_at_risk",
    "Running audits last observed (or, never observed, started) more than half of "
    "AUDITREC_CLOUDFLARE_RETENTION ago: their instance may have ended that long ago, its "
    "error soon deleted by Cloudflare (refreshed every 30 s).",
    registry=REGISTRY,
)

# -- every consumer -------------------------------------------------------------------------

CONSUMER_LAG = Gauge(
    "auditrec_consumer_lag_records",
    "Records not yet consumed, per component and assigned partition.",
    ["component", "topic", "partition"],
    registry=REGISTRY,
)
CONSUMER_PROGRESS = Gauge(
    "auditrec_consumer_last_progress_timestamp_seconds",
    "When a component last handled records of a partition.",
    ["component", "topic", "partition"],
    registry=REGISTRY,
)
DEAD_LETTERS_KEPT = Gauge(
    "auditrec_dead_letters_kept",
    "Dead letters the dead-letter topic holds, one per source record set aside, per "
    "partition (refreshed every 30 s by each watchdog; shrinks when purged).",
    ["topic", "partition"],
    registry=REGISTRY,
)
DEAD_LETTERS_PURGED = Counter(
    "auditrec_dead_letters_purged",
    "Dead letters removed by `auditrec dead-letters purge` (or POST /dead-letters/purge) in "
    "this process.",
    registry=REGISTRY,
)
DEAD_LETTERED = Counter(
    "auditrec_dead_letters",
    "Records set aside by a consumer group, by reason (invalid: could not be decoded; failed: "
    "could not be handled; conflict: its event_id already names other content in its audit); "
    "the dead-letter topic keeps each source record once however many groups set it aside "
    "(auditrec_dead_letters_kept).",
    ["consumer", "reason"],
    registry=REGISTRY,
)
EVENTS_PROJECTED = Counter(
    "auditrec_events_projected",
    "Lifecycle events applied to the projection (skipped: already applied; conflict: "
    "refused, its event_id already naming other content in its audit).",
    ["result"],
    registry=REGISTRY,
)
COMPONENT_HEALTHY = Gauge(
    "auditrec_component_healthy",
    "1 while a component of this process is well; 0 while failing or stalled.",
    ["component"],
    registry=REGISTRY,
)

# -- the API, telemetry, the brake ----------------------------------------------------------

HTTP_REQUESTS = Counter(
    "auditrec_http_requests",
    "HTTP requests answered by the API, by method, route and status.",
    ["method", "route", "status"],
    registry=REGISTRY,
)
HTTP_DURATION = Histogram(
    "auditrec_http_request_duration_seconds",
    "Latency of the API's answers, by method and route.",
    ["method", "route"],
    buckets=_SECONDS,
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

# --- orphans ----------------------------------------------------------------------------------
ORPHANS = Gauge(
    "auditrec_orphans",
    "Open orphans per watched workflow: instances listed alive that no audit holds, older than "
    "AUDITREC_INSTANCE_LOST_GRACE, created after auditrec began watching the workflow "
    "(`auditrec orphans`).",
    ["workflow"],
    registry=REGISTRY,
)
ORPHAN_SCAN_PAGES = Counter(
    "auditrec_orphan_scan_pages",
    "Instance listing pages requested by orphan scans, per workflow (a scan that shares the "
    "watchdog's listing requests none).",
    ["workflow"],
    registry=REGISTRY,
)

# --- the outcome feed -----------------------------------------------------------------------------
OUTCOMES = Counter(
    "auditrec_outcomes",
    "Outcome feed entries by endpoint and result: delivered, retried (an attempt failed and is "
    "retried after a back-off), parked (given up after AUDITREC_WEBHOOK_RETRY_FOR, or behind a "
    "parked entry of its audit, or a retry an operator asked for that failed again).",
    ["endpoint", "result"],
    registry=REGISTRY,
)
OUTCOMES_WAITING = Gauge(
    "auditrec_outcomes_waiting",
    "Outcome feed entries of this process waiting to be delivered, by endpoint.",
    ["endpoint"],
    registry=REGISTRY,
)
OUTCOMES_PARKED = Gauge(
    "auditrec_outcomes_parked",
    "Outcome feed entries parked for an operator (`auditrec deliveries`), by endpoint.",
    ["endpoint"],
    registry=REGISTRY,
)
OUTCOME_DELAY = Histogram(
    "auditrec_outcome_delay_seconds",
    "From a decision (the entry's decided_at) to its delivery, by endpoint.",
    ["endpoint"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 3600),
    registry=REGISTRY,
)

# --- the event subscription (subscriber, confirmer) ---------------------------------------------
SUBSCRIPTION_MESSAGES = Counter(
    "auditrec_subscription_messages",
    "Messages of the Workflows event subscription, by event type (errored, started, ...) and "
    "what became of them: pulled, redelivered (pulled again), acked, dead_lettered (unreadable), "
    "unmatched (no audit holds the instance), ignored (another workflow's).",
    ["event", "outcome"],
    registry=REGISTRY,
)
SUBSCRIPTION_PULLS = Counter(
    "auditrec_subscription_pulls",
    "Pulls of the event subscription's queue, by outcome: messages, empty, or why it failed "
    "(rate_limited, server_error, timeout, network, unauthorized, not_found, invalid_response).",
    ["outcome"],
    registry=REGISTRY,
)
SUBSCRIPTION_BACKLOG = Gauge(
    "auditrec_subscription_backlog_messages",
    "Messages in the event subscription's queue, as its last pull answer counted them.",
    registry=REGISTRY,
)
SUBSCRIPTION_OLDEST_UNACKED = Gauge(
    "auditrec_subscription_oldest_unacked_age_seconds",
    "Age of the oldest message the subscriber has pulled and not yet acknowledged (0: none).",
    registry=REGISTRY,
)
SUBSCRIPTION_LAST_PULL = Gauge(
    "auditrec_subscription_last_pull_timestamp_seconds",
    "When the subscriber last pulled its queue successfully.",
    registry=REGISTRY,
)
CONFIRMATIONS_WAITING = Gauge(
    "auditrec_subscription_confirmations_waiting",
    "Deaths the queue reported whose confirming probe waits for the budget (the confirmer's "
    "backlog).",
    registry=REGISTRY,
)
DETECTION_SECONDS = Histogram(
    "auditrec_detection_seconds",
    "From a workflow's death as the event subscription reported it (eventTimestamp) to the "
    "reconciler's decision to fail the audit (its failed row follows within milliseconds).",
    buckets=(0.25, 0.5, 1, 2, 3, 5, 10, 30, 60, 300, 900, 3600),
    registry=REGISTRY,
)
