"""Settings from the environment (prefix ``AUDITREC_``) and flags. Durations: ``15m``, ``90s``."""

from __future__ import annotations

import base64
import difflib
import ipaddress
import math
import os
import re
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from consumers.runtime.endpoints import Endpoint, parse_webhook_urls, queue_endpoint
from consumers.runtime.tokens import ApiToken, parse_tokens
from statemachine.errors import ConfigError
from statemachine.policy import Policy, parse_duration

__all__ = [
    "CLOUDFLARE_API_URL",
    "LOOPBACK_NAMES",
    "Settings",
    "is_loopback",
    "load_settings",
    "reserve_of",
    "share_of",
    "unknown_variables",
]

Duration = Annotated[timedelta, BeforeValidator(parse_duration)]
CLOUDFLARE_API_URL = "https://api.cloudflare.com/client/v4"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is reachable from this machine only."""
    name = host.strip().strip("[]").lower().rstrip(".")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


def share_of(budget: int, share: float) -> int:
    """The requests of a window a spender with ``share`` of ``budget`` may take (rounded down)."""
    return int(budget * share)


def reserve_of(budget: int, floor: float) -> int:
    """The requests of a window a ``floor`` of ``budget`` keeps (rounded up, so the floor holds;
    the rounding slack absorbs float error such as ``1000 * 0.3``)."""
    return min(math.ceil(budget * floor - 1e-9), budget)


class Settings(BaseSettings):
    # An empty variable counts as unset (as compose files pass them through).
    model_config = SettingsConfigDict(
        env_prefix="AUDITREC_",
        extra="ignore",
        frozen=True,
        env_ignore_empty=True,
        use_attribute_docstrings=True,  # each field's docstring is its documented description
    )

    event_log_url: str = "sqlite:///.auditrec/events.db"
    """The event log: `sqlite:///relative/path`, `sqlite:////absolute/path`, or
    `kafka://host:9092[,host2:9092]`."""
    database_url: str = "sqlite:///.auditrec/audits.db"
    """The projection store: `sqlite:///relative/path`, `sqlite:////absolute/path` (four
    slashes), or `postgresql://user@host:5432/db`."""
    topic_prefix: str = Field(default="audit", pattern=r"^[A-Za-z0-9._-]{1,100}$")
    """Topics are `<prefix>.lifecycle.v1`, `<prefix>.probe-requests.v1`,
    `<prefix>.dead-letter.v1` and `<prefix>.ingest.v1`."""
    ingest_topic: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._-]{1,249}$")
    """The topic Kafka publishers write their events to (default `<prefix>.ingest.v1`): the
    `ingest` component validates each record (publisher types only) onto the lifecycle topic,
    which only auditrec writes; what it refuses is dead-lettered with the reason."""
    group_prefix: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._-]{1,100}$")
    """Consumer groups are `<prefix>-projector`, `-reconciler`, `-probe`, `-telemetry`; unset:
    the topic prefix (set `auditrec` to keep the groups of versions that used fixed names)."""

    instance_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._-]{1,100}$")
    """A stable identity per process (a pod name, a host and slot): Kafka static group
    membership, so a restarted process gets its partitions back without a rebalance. Never
    share one between live processes; a stopped static member's partitions move only when its
    session (10 s) expires."""

    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    """How auditrec talks to Kafka."""
    kafka_sasl_mechanism: str | None = None
    """The SASL mechanism (`PLAIN`, `SCRAM-SHA-256`, …) with `SASL_*` protocols."""
    kafka_sasl_username: str | None = None
    """The SASL user name."""
    kafka_sasl_password: SecretStr | None = None
    """The SASL password (never logged)."""
    kafka_ssl_cafile: Path | None = None
    """The CA bundle that verifies the brokers (TLS)."""
    kafka_ssl_certfile: Path | None = None
    """This client's certificate (mutual TLS)."""
    kafka_ssl_keyfile: Path | None = None
    """This client's private key (mutual TLS)."""
    kafka_lifecycle_partitions: int = Field(default=12, ge=1)
    """Partitions of the lifecycle topic, when `auditrec init` creates it."""
    kafka_replication_factor: int = Field(default=1, ge=1)
    """Replication factor of the topics `auditrec init` creates."""
    kafka_lifecycle_retention: Duration | None = None
    """How long the lifecycle log keeps events (at least `1h`; unset: forever). auditrec trims
    the log itself, never past what every consumer has moved past (a checkpoint, the
    projector's offsets); the embedded log too."""

    cloudflare_account_id: str | None = None
    """The Cloudflare account whose workflows are probed (required by Cloudflare's API)."""
    cloudflare_api_token: SecretStr | None = None
    """The Workflows API's bearer token (required by Cloudflare's API; never logged)."""
    cloudflare_workflow: str = Field(default="site-audit", min_length=1, max_length=64)
    """The workflow audits run as unless their `AuditStarted` names another (`workflow`)."""
    cloudflare_workflows: str = ""
    """Other workflows auditrec watches besides `AUDITREC_CLOUDFLARE_WORKFLOW`, separated by
    commas or whitespace (e.g. `keyword-research, site-export`): their instances are listed by
    the watchdog and for orphans, and may be terminated (see `AUDITREC_TERMINATE_WORKFLOWS`)."""
    terminate_workflows: str | None = None
    """The workflows whose instances auditrec may terminate (a stalled audit's with
    `AUDITREC_STALLED_ACTION=terminate`, an orphan's on an operator's word), separated by
    commas or whitespace; unset: the watched workflows; `none`: none at all. An audit naming
    any other workflow is never terminated, whoever published it."""
    cloudflare_retention: Duration = Field(default=timedelta(days=7), gt=timedelta(0))
    """How long Cloudflare keeps an ended instance (7 days on the Paid plan by default, 3 on
    Free, up to 30): a running audit whose instance may have ended more than half of this ago
    without an observation since is reported (`/readyz`, an alert), its error about to be
    deleted."""
    cloudflare_api_url: str = CLOUDFLARE_API_URL
    """The Workflows API's base URL (a simulator's: `http://127.0.0.1:8787/client/v4`)."""
    cloudflare_queue_id: str | None = None
    """The Queue the Workflows event subscription publishes to, read by its HTTP pull consumer:
    set, the `subscriber` component learns of deaths in seconds (unset: polling alone)."""
    cloudflare_queues_token: SecretStr | None = None
    """The token that pulls and acknowledges that queue (Queues read and write; default: the
    API token)."""
    subscription_poll: Duration = Field(default=timedelta(seconds=1), gt=timedelta(0))
    """How often the subscriber pulls the queue: at once again after a full batch, up to twice
    as slowly while the queue is empty, backing off up to 30 s after failed pulls."""
    subscription_batch: int = Field(default=100, ge=1, le=100)
    """Messages a pull asks for (Cloudflare allows 1..100)."""
    subscription_visibility: Duration = Field(
        default=timedelta(seconds=60), ge=timedelta(seconds=15), le=timedelta(hours=12)
    )
    """How long a pulled message stays leased to the subscriber before the queue delivers it
    again: room for a message whose audit the projection does not know yet to be looked for
    again (10 s), and for its acknowledgement."""

    posthog_api_key: SecretStr | None = None
    """PostHog's project API key; telemetry is off while it is unset."""
    posthog_host: str | None = None
    """PostHog's host (unset: PostHog's default)."""

    webhook_urls: SecretStr | None = None
    """Where the outcome feed is delivered as signed webhooks: URLs separated by commas or
    whitespace, each optionally followed by `#TYPE|TYPE…` to receive only those outcome types
    (e.g. `https://app.example/hooks/audits#audit.failed|audit.overturned`; the fragment is
    never sent). Needs `AUDITREC_WEBHOOK_SECRET`. Never logged whole: a URL may carry the
    receiver's token."""
    webhook_secret: SecretStr | None = None
    """The Standard Webhooks secret (`whsec_` and base64) every delivery is signed with (never
    logged)."""
    webhook_timeout: Duration = Field(default=timedelta(seconds=10), gt=timedelta(0))
    """How long a webhook endpoint has to answer a delivery; no answer in time is a failure,
    retried."""
    webhook_retry_for: Duration = Field(default=timedelta(hours=24), gt=timedelta(0))
    """How long an outcome is retried (back-off from 1 s doubling up to 5 min, with jitter)
    before it is parked for an operator (`auditrec deliveries`)."""
    outcome_queue_id: str | None = None
    """A Cloudflare Queue the outcome feed is also sent to (one JSON message per entry, for
    the product's Worker), with `AUDITREC_CLOUDFLARE_ACCOUNT_ID` and the Queues token (Queues
    write)."""

    stale_running_after: Duration = timedelta(minutes=15)
    """Running audits older than this are watched (probed by the watchdog)."""
    instance_lost_grace: Duration = timedelta(minutes=10)
    """An audit whose instance is `not_found` or `not_attached` is failed `instance_lost` only
    once it is older than this."""
    finalize_grace: Duration = timedelta(minutes=10)
    """A `complete` workflow has this long after it ended to report its audit's completion
    before the audit is failed `finalize_lost`."""
    watchdog_interval: Duration = timedelta(minutes=5)
    """The watchdog's tick period, shared by every process."""
    watchdog_batch_limit: int = Field(default=100, ge=1, le=100_000)
    """Audits a tick probes, each asked for alone, when the instance listing is not used."""
    watchdog_bulk_limit: int = Field(default=10_000, ge=0, le=1_000_000)
    """Audits a tick looks at with the workflow's instance listing (bulk discovery); `0` (or
    not above the batch limit): never list, every audit is asked for alone."""
    stalled_after: Duration = timedelta(0)
    """A running audit whose publisher has sent nothing for this long (measured from when
    auditrec recorded its latest event, never from the event's own `occurred_at`) while its
    instance answers `running` or `queued` is stalled (rule and error code `stalled`); `0`
    (the default) switches stall detection off; 45m is a sensible value. `paused`, `waiting`
    and `waitingForPause` instances are never stalled."""
    stalled_action: Literal["report", "terminate"] = "report"
    """What a stall verdict does: `report` records it and lists the audit (`auditrec audits
    --stalled`, the console, a metric) without failing it; `terminate` terminates the instance
    through the Workflows API and fails the audit `stalled` once the termination is observed.
    Terminations are held by the mass-failure brake like `instance_lost` decisions, never made
    in shadow mode, and only ever made in `AUDITREC_TERMINATE_WORKFLOWS`."""
    orphan_interval: Duration = timedelta(hours=1)
    """How often the watched workflows' alive instances are listed for orphans (instances no
    audit holds, older than `AUDITREC_INSTANCE_LOST_GRACE`, created after auditrec began
    watching the workflow); `0`: never."""
    on_demand_min_interval: Duration = timedelta(seconds=30)
    """A status read probes again only when the last observation is older than this."""
    on_demand_wait: Duration = timedelta(seconds=3)
    """How long a status read waits for the outcome of its probe."""
    sweep_wait: Duration = timedelta(seconds=60)
    """How long a sweep waits for its outcomes."""

    probe_budget: int = Field(default=1000, ge=1)
    """Workflows API requests per budget window, shared by every process probing the account
    (Cloudflare allows 1200 per 5 minutes)."""
    probe_budget_window: Duration = timedelta(minutes=5)
    """The sliding window of the probe budget."""
    on_demand_budget_share: float = Field(default=0.5, gt=0.0, le=1.0)
    """The part of each probe budget window that status reads (on-demand probes) may spend, in
    every process together (0 < share <= 1), never more than what the watchdog's floor leaves
    (`1 - AUDITREC_WATCHDOG_BUDGET_FLOOR`); past it a read answers from the table with
    `"probed": false` and why, and the rest of the window stays for the watchdog and others."""
    watchdog_budget_floor: float = Field(default=0.3, ge=0.0, lt=1.0)
    """The part of each probe budget window reserved for the watchdog (0 <= floor < 1), in
    every process together: status reads, manual probes and every other spender together take
    at most the rest, so the watchdog can always probe that many requests per window (it may
    also spend what the others leave). Must leave status reads at least one request per window
    of `AUDITREC_PROBE_BUDGET`."""
    probe_concurrency: int = Field(default=8, ge=1, le=256)
    """Concurrent Workflows API requests of a process."""
    probe_timeout: Duration = timedelta(seconds=10)
    """The time limit of one Workflows API request."""

    brake_min_audits: int = Field(default=20, ge=0, le=1_000_000)
    """The mass-failure brake engages when one sweep would fail at least this many audits
    `instance_lost` (and more than the share below); `0` switches the brake off."""
    brake_min_share: float = Field(default=0.5, ge=0.0, le=1.0)
    """The share of a sweep's observations that must fail `instance_lost` for the brake to
    engage."""
    brake_window: Duration = Field(default=timedelta(minutes=5), gt=timedelta(0))
    """The sliding window over which the brake also judges `instance_lost` decisions that
    belong to no sweep (status reads, deaths the event subscription reported): at least
    `AUDITREC_BRAKE_MIN_AUDITS` of them within it engage the brake."""

    mode: Literal["enforce", "shadow"] = "enforce"
    """`shadow`: record what would fail (`AuditFailureSimulated`) without failing it."""
    api_tokens: SecretStr | None = None
    """Comma-separated bearer tokens, each `name:token:scope` (scope `read`, `publish` or
    `operate`) or a bare `token` (full access, named `token-N` by its position); when set,
    every route but `/healthz` and `/metrics` needs one. A malformed entry, or a token shorter
    than 16 characters, stops `serve` (exit 2) naming the entry, never its secret."""
    api_host: str = "127.0.0.1"
    """The address the HTTP API (and a `serve` without the API's `/metrics`) listens on. On
    any but a loopback address, `serve` refuses to run the API without tokens (see
    `AUDITREC_API_ALLOW_OPEN`)."""
    api_allow_open: bool = False
    """`true`: `serve` runs the API without tokens on an address other than loopback, every
    route open to whoever reaches it. Without it, such a `serve` refuses to start (exit 2)."""
    api_allowed_hosts: str = Field(default=",".join(LOOPBACK_NAMES), min_length=1)
    """On an API without tokens: the comma-separated names a request's `Host` may carry (any
    port; `*`: any name). Other names are answered 421, so a web page whose name is made to
    resolve to this address (DNS rebinding) reaches nothing; `/healthz`, `/readyz` and
    `/metrics` answer any `Host` (kubelets and scrapers send the pod's address). Unused once
    tokens are set."""
    api_port: int = Field(default=8080, ge=0, le=65535)
    """The HTTP API's port."""
    api_max_body_bytes: int = Field(default=1_048_576, ge=1024)
    """The largest request body the API reads (413 beyond)."""
    api_public_docs: bool = False
    """With tokens set: `/openapi.json`, `/asyncapi.json` and `/docs` readable without one
    (Swagger UI's files are served by the API itself, never from a CDN)."""
    api_public_readyz: bool = False
    """With tokens set: `/readyz` answers without one (Kubernetes probes send none)."""
    api_header_timeout: Duration = Field(
        default=timedelta(seconds=10), ge=timedelta(seconds=1), le=timedelta(minutes=10)
    )
    """How long a client has to send a request's line and headers, from its connection or
    its request's first byte (1 s to 10 min); then the API answers 408 and closes the
    connection. A connection that sends nothing is closed as soon."""
    api_body_timeout: Duration = Field(
        default=timedelta(seconds=30), ge=timedelta(seconds=1), le=timedelta(hours=1)
    )
    """How long a client has to send a request's whole body once its headers are in (1 s to
    1 h); then the API answers 408 and closes the connection."""
    api_max_header_bytes: int = Field(default=16_384, ge=1024, le=1_048_576)
    """The largest request line and headers the API reads (1 KiB to 1 MiB): 431 beyond."""
    api_max_connections: int = Field(default=1000, ge=1, le=100_000)
    """Open connections the API keeps at once (1 to 100,000); one more is answered 503 and
    closed at once."""
    api_auth_failures_per_minute: int = Field(default=10, ge=1, le=100_000)
    """Failed authentications a client (an IPv4 address, an IPv6 address's /64) may make: a
    burst of this many, then one every 60/N seconds (1 to 100,000). Past it every request of
    that client but `/healthz`, `/metrics` and a public `/readyz` is answered 429 with
    `Retry-After`, its right token included. Each API process counts alone."""
    api_forwarded_allow_ips: str = Field(default="127.0.0.1,::1", min_length=1)
    """The comma-separated addresses or networks (`10.0.0.0/8`, no host bits set; `*`: any) of
    the proxies whose `X-Forwarded-For` and `X-Forwarded-Proto` the API believes: behind a TLS
    proxy, the console's cookie is then `Secure`, and failed authentications are counted per
    real client. Never list addresses a client reaches the API from directly."""
    console_refresh: Duration = Field(
        default=timedelta(seconds=5), ge=timedelta(seconds=2), le=timedelta(minutes=10)
    )
    """How often the console's live pages (the overview and the lists) read themselves again
    while they are shown (2 s to 10 min; whole seconds)."""
    metrics_port: int = Field(default=9464, ge=0, le=65535)
    """Where a `serve` without the API serves `/metrics` (on the API host); `0`: nowhere."""
    log_format: Literal["auto", "json", "console"] = "auto"
    """Logs go to stderr: JSON lines when it is not a terminal, readable lines when it is
    (`json` or `console` to choose)."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    """The least level logged."""

    @field_validator("event_log_url")
    @classmethod
    def _event_log_scheme(cls, value: str) -> str:
        if not value.startswith(("sqlite://", "kafka://")):
            raise ValueError("must start with sqlite:/// or kafka://")
        return value

    @field_validator("cloudflare_workflow", "cloudflare_workflows", "terminate_workflows")
    @classmethod
    def _workflow_names(cls, value: str | None) -> str | None:
        for name in _names(value or ""):
            if not _WORKFLOW_NAME.fullmatch(name):
                raise ValueError(
                    f"{name[:80]!r} is not a workflow name (1-64 letters, digits, - and _)"
                )
        return value

    @field_validator("kafka_lifecycle_retention")
    @classmethod
    def _retention_floor(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value < timedelta(hours=1):
            raise ValueError("must be at least 1h (checkpoints are taken every minute)")
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_level(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @field_validator("cloudflare_api_url", "posthog_host")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/") if value else value

    @field_validator("api_forwarded_allow_ips")
    @classmethod
    def _proxy_addresses(cls, value: str) -> str:
        for entry in (e.strip() for e in value.split(",")):
            if entry == "*":
                continue
            try:  # strict, as uvicorn reads it: it ignores a network with host bits set
                ipaddress.ip_network(entry)
            except ValueError as exc:
                raise ValueError(
                    f"{entry!r} is no address or network (e.g. 10.0.0.5, 10.0.0.0/8, or *): {exc}"
                ) from None
        return value

    @field_validator("database_url")
    @classmethod
    def _database_scheme(cls, value: str) -> str:
        if not value.startswith(("sqlite://", "postgresql://", "postgres://")):
            raise ValueError("must start with sqlite:/// or postgresql://")
        return value

    def watchdog_reserve(self) -> int:
        """Requests of each probe budget window kept for the watchdog (the floor, rounded up)."""
        return reserve_of(self.probe_budget, self.watchdog_budget_floor)

    def on_demand_cap(self) -> int:
        """Requests of each window status reads may take: their share, within the floor."""
        return min(
            share_of(self.probe_budget, self.on_demand_budget_share),
            self.probe_budget - self.watchdog_reserve(),
        )

    def budget_refusal(self) -> str | None:
        """Why the probe budget's shares cannot work, naming the variables; ``None`` if they
        can (status reads need at least one request per window beside the watchdog's floor)."""
        if self.on_demand_cap() >= 1:
            return None
        return (
            "AUDITREC_WATCHDOG_BUDGET_FLOOR: a floor of "
            f"{self.watchdog_budget_floor:g} (AUDITREC_WATCHDOG_BUDGET_FLOOR) and a share of "
            f"{self.on_demand_budget_share:g} (AUDITREC_ON_DEMAND_BUDGET_SHARE) of "
            f"AUDITREC_PROBE_BUDGET={self.probe_budget} requests leave status reads no request "
            "per window: lower the floor, raise the share or the budget"
        )

    def policy(self) -> Policy:
        return Policy(
            stale_running_after=self.stale_running_after,
            instance_lost_grace=self.instance_lost_grace,
            finalize_grace=self.finalize_grace,
            shadow=self.mode == "shadow",
            brake_min_audits=self.brake_min_audits,
            brake_min_share=self.brake_min_share,
            stalled_after=self.stalled_after,
            stalled_action=self.stalled_action,
            terminate_workflows=self.terminate_workflow_names(),
            default_workflow=self.cloudflare_workflow,
        )

    def watched_workflows(self) -> tuple[str, ...]:
        """The workflows auditrec watches: the default one first, then the others named."""
        names = [self.cloudflare_workflow, *_names(self.cloudflare_workflows)]
        return tuple(dict.fromkeys(names))

    def terminate_workflow_names(self) -> frozenset[str]:
        """The workflows whose instances auditrec may terminate."""
        if self.terminate_workflows is None:
            return frozenset(self.watched_workflows())
        if self.terminate_workflows.strip().lower() == "none":
            return frozenset()
        return frozenset(_names(self.terminate_workflows))

    @property
    def account_id(self) -> str:
        """The Cloudflare account probed (``local`` for a simulator that ignores it)."""
        return self.cloudflare_account_id or "local"

    def probing_blind(self) -> str | None:
        """Why probing could not work with these settings (Cloudflare's API without a token
        or an account id), naming the variables; ``None`` when it can."""
        if not self.cloudflare_api_url.startswith(CLOUDFLARE_API_URL.split("/client")[0]):
            return None  # another Workflows API (a simulator, a proxy): its own rules
        missing = [
            name
            for name, value in (
                ("AUDITREC_CLOUDFLARE_API_TOKEN", self.cloudflare_api_token),
                ("AUDITREC_CLOUDFLARE_ACCOUNT_ID", self.cloudflare_account_id),
            )
            if not value
        ]
        if not missing:
            return None
        return (
            f"probing Cloudflare's Workflows API needs {' and '.join(missing)}; set "
            f"{'them' if len(missing) > 1 else 'it'}, point AUDITREC_CLOUDFLARE_API_URL at "
            "another Workflows API (e.g. `auditrec simulate-workflows`), or run without the "
            "probe (`serve --only …`)"
        )

    def api_refusal(self) -> str | None:
        """Why the API must not run with these settings, naming the variables: a malformed or
        short token, or no tokens on an address other than loopback without
        ``AUDITREC_API_ALLOW_OPEN``; ``None`` when it may (``serve`` and ``doctor`` agree)."""
        try:
            tokens = self.api_token_specs()
        except ConfigError as exc:
            return str(exc)
        if tokens or self.api_allow_open or is_loopback(self.api_host):
            return None
        return (
            f"the API would listen on {self.api_host} without tokens, open to anyone who "
            "reaches that address: set AUDITREC_API_TOKENS (name:token:scope, …), listen on "
            "loopback (AUDITREC_API_HOST=127.0.0.1), or set AUDITREC_API_ALLOW_OPEN=true to "
            "run it open on purpose"
        )

    def outcome_endpoints(self) -> tuple[Endpoint, ...]:
        """Where the outcome feed goes (:mod:`consumers.runtime.endpoints`): the webhooks, then
        the queue; a malformed entry is a :class:`ConfigError` naming it."""
        urls = self.webhook_urls.get_secret_value() if self.webhook_urls else ""
        endpoints = parse_webhook_urls(urls) if urls else ()
        if self.outcome_queue_id:
            endpoints = (*endpoints, queue_endpoint(self.outcome_queue_id))
        return endpoints

    def outcomes_refusal(self) -> str | None:
        """Why the outcome feed cannot run with these settings, naming the variables; ``None``
        when it can (or has nowhere to go)."""
        try:
            endpoints = self.outcome_endpoints()
        except ConfigError as exc:
            return str(exc)
        if any(e.kind == "webhook" for e in endpoints):
            if self.webhook_secret is None:
                return (
                    "AUDITREC_WEBHOOK_URLS needs AUDITREC_WEBHOOK_SECRET (a Standard Webhooks "
                    "secret, whsec_ and base64) to sign deliveries"
                )
            secret = self.webhook_secret.get_secret_value().removeprefix("whsec_")
            try:
                key = base64.b64decode(secret, validate=True)
            except ValueError:
                key = b""
            if not 24 <= len(key) <= 64:
                return (
                    "AUDITREC_WEBHOOK_SECRET is not a Standard Webhooks secret: whsec_ and the "
                    "base64 of 24 to 64 random bytes"
                )
        if self.outcome_queue_id and not self.cloudflare_account_id:
            return "AUDITREC_OUTCOME_QUEUE_ID needs AUDITREC_CLOUDFLARE_ACCOUNT_ID"
        cloudflare = self.cloudflare_api_url.startswith(CLOUDFLARE_API_URL.split("/client")[0])
        token = self.cloudflare_queues_token or self.cloudflare_api_token
        if self.outcome_queue_id and cloudflare and token is None:
            return (
                "AUDITREC_OUTCOME_QUEUE_ID needs a token with Queues write: "
                "AUDITREC_CLOUDFLARE_QUEUES_TOKEN (or AUDITREC_CLOUDFLARE_API_TOKEN)"
            )
        return None

    def allowed_hosts(self) -> frozenset[str]:
        """``AUDITREC_API_ALLOWED_HOSTS`` as lower-case names."""
        return frozenset(
            name.strip().lower().rstrip(".")
            for name in self.api_allowed_hosts.split(",")
            if name.strip()
        )

    def api_token_list(self) -> list[str]:
        """The configured secrets (see :meth:`api_token_specs` for names and scopes)."""
        return [t.secret for t in self.api_token_specs()]

    def api_token_specs(self) -> tuple[ApiToken, ...]:
        """``AUDITREC_API_TOKENS`` parsed (:mod:`consumers.runtime.tokens`); a malformed entry
        is a :class:`ConfigError` naming it."""
        if self.api_tokens is None:
            return ()
        return parse_tokens(self.api_tokens.get_secret_value())


# AUDITREC_* variables that are not settings: the simulator's, the clients' (the API's URL and
# token in the publishing guide's examples), deploy/kafka/acls.sh's, and the project's own
# tooling's (`make test`, `make chaos`, `make fuzz`, `make screenshots`, scripts/services.sh).
OTHER_VARIABLES = frozenset(
    {
        "AUDITREC_SIMULATOR_TOKEN",
        "AUDITREC_URL",
        "AUDITREC_TOKEN",
        "AUDITREC_PRINCIPAL",
        "AUDITREC_REQUIRE_SERVICES",
        "AUDITREC_SERVICES_DIR",
        "AUDITREC_KAFKA_HEAP",
        "AUDITREC_WRITE_PLAN",
        "AUDITREC_SCREENSHOTS_DIR",
    }
)
OTHER_PREFIXES = ("AUDITREC_TEST_", "AUDITREC_CHAOS_", "AUDITREC_FUZZ_")


_WORKFLOW_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _names(value: str) -> list[str]:
    """Names separated by commas or whitespace."""
    return [n for n in re.split(r"[\s,]+", value) if n]


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """A sentence for each ``AUDITREC_*`` variable that is no setting, with the closest known
    name (a misspelled variable would otherwise be ignored without a word)."""
    known = {f"AUDITREC_{name.upper()}" for name in Settings.model_fields}
    out = []
    for name in sorted(environ):
        if (
            not name.startswith("AUDITREC_")
            or name in known
            or name in OTHER_VARIABLES
            or name.startswith(OTHER_PREFIXES)
        ):
            continue
        close = difflib.get_close_matches(name, known | OTHER_VARIABLES, n=1, cutoff=0.75)
        out.append(f"unknown variable {name}" + (f" (did you mean {close[0]}?)" if close else ""))
    return out


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment; a bad value raises :class:`ConfigError` naming it, and
    so does an ``AUDITREC_*`` variable that is no setting (a misspelled one would otherwise be
    ignored, leaving the default it meant to change): every command refuses to start, ``serve``
    and ``doctor`` alike."""
    unknown = unknown_variables(os.environ)
    if unknown:
        raise ConfigError(
            "invalid configuration: "
            + "; ".join(unknown)
            + " (an AUDITREC_* variable must be a setting: docs/reference/configuration.md)"
        )
    try:
        settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            name = "AUDITREC_" + "_".join(str(p) for p in err["loc"]).upper()
            problems.append(f"{name}: {err['msg']}")
        raise ConfigError("invalid configuration: " + "; ".join(problems)) from None
    if (refusal := settings.budget_refusal()) is not None:
        raise ConfigError(f"invalid configuration: {refusal}")
    return settings
