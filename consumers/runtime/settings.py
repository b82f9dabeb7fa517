"""Settings from the environment (prefix ``AUDITREC_``) and flags. Durations: ``15m``, ``90s``."""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import structlog
from pydantic import BeforeValidator, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from consumers.runtime.tokens import ApiToken, parse_tokens
from statemachine.errors import ConfigError
from statemachine.policy import Policy, parse_duration

__all__ = ["CLOUDFLARE_API_URL", "Settings", "load_settings", "unknown_variables"]

log = structlog.get_logger("auditrec")

Duration = Annotated[timedelta, BeforeValidator(parse_duration)]
CLOUDFLARE_API_URL = "https://api.cloudflare.com/client/v4"


class Settings(BaseSettings):
    # An empty variable counts as unset (as compose files pass them through).
    model_config = SettingsConfigDict(
        env_prefix="AUDITREC_", extra="ignore", frozen=True, env_ignore_empty=True
    )

    event_log_url: str = "sqlite:///.auditrec/events.db"
    database_url: str = "sqlite:///.auditrec/audits.db"
    topic_prefix: str = Field(default="audit", pattern=r"^[A-Za-z0-9._-]{1,100}$")
    # Consumer groups are <group_prefix>-<component>; by default the topic prefix.
    group_prefix: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._-]{1,100}$")

    # A stable identity per process (a pod name, a host and slot): consumer groups keep a
    # restarted process's partitions with it instead of rebalancing (static membership).
    instance_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._-]{1,100}$")

    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    kafka_sasl_mechanism: str | None = None
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = None
    kafka_ssl_cafile: Path | None = None
    kafka_ssl_certfile: Path | None = None
    kafka_ssl_keyfile: Path | None = None
    kafka_lifecycle_partitions: int = Field(default=12, ge=1)
    kafka_replication_factor: int = Field(default=1, ge=1)
    # How long the lifecycle log keeps events (None: forever). auditrec trims it itself, never
    # past a checkpoint (consumers/components/retention.py); the embedded log too.
    kafka_lifecycle_retention: Duration | None = None

    cloudflare_account_id: str | None = None
    cloudflare_api_token: SecretStr | None = None
    cloudflare_workflow: str = "site-audit"
    cloudflare_api_url: str = CLOUDFLARE_API_URL

    posthog_api_key: SecretStr | None = None
    posthog_host: str | None = None

    stale_running_after: Duration = timedelta(minutes=15)
    instance_lost_grace: Duration = timedelta(minutes=10)
    finalize_grace: Duration = timedelta(minutes=10)
    watchdog_interval: Duration = timedelta(minutes=5)
    watchdog_batch_limit: int = Field(default=100, ge=1, le=100_000)
    # Audits a tick looks at with the workflow's instance listing (bulk discovery); 0: never
    # list, every audit is asked for alone.
    watchdog_bulk_limit: int = Field(default=10_000, ge=0, le=1_000_000)
    on_demand_min_interval: Duration = timedelta(seconds=30)
    on_demand_wait: Duration = timedelta(seconds=3)
    sweep_wait: Duration = timedelta(seconds=60)

    probe_budget: int = Field(default=1000, ge=1)
    probe_budget_window: Duration = timedelta(minutes=5)
    probe_concurrency: int = Field(default=8, ge=1, le=256)
    probe_timeout: Duration = timedelta(seconds=10)

    # The mass-failure brake: 0 audits switches it off.
    brake_min_audits: int = Field(default=20, ge=0, le=1_000_000)
    brake_min_share: float = Field(default=0.5, ge=0.0, le=1.0)

    mode: Literal["enforce", "shadow"] = "enforce"
    api_tokens: SecretStr | None = None
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8080, ge=0, le=65535)
    api_max_body_bytes: int = Field(default=1_048_576, ge=1024)
    # With API tokens set: /openapi.json and /docs, or /readyz, readable without one.
    api_public_docs: bool = False
    api_public_readyz: bool = False
    # Where a `serve` without the API serves /metrics (on AUDITREC_API_HOST); 0: nowhere.
    metrics_port: int = Field(default=9464, ge=0, le=65535)
    log_format: Literal["auto", "json", "console"] = "auto"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"

    @field_validator("event_log_url")
    @classmethod
    def _event_log_scheme(cls, value: str) -> str:
        if not value.startswith(("sqlite://", "kafka://")):
            raise ValueError("must start with sqlite:/// or kafka://")
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

    @field_validator("database_url")
    @classmethod
    def _database_scheme(cls, value: str) -> str:
        if not value.startswith(("sqlite://", "postgresql://", "postgres://")):
            raise ValueError("must start with sqlite:/// or postgresql://")
        return value

    def policy(self) -> Policy:
        return Policy(
            stale_running_after=self.stale_running_after,
            instance_lost_grace=self.instance_lost_grace,
            finalize_grace=self.finalize_grace,
            shadow=self.mode == "shadow",
            brake_min_audits=self.brake_min_audits,
            brake_min_share=self.brake_min_share,
        )

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

    def api_token_list(self) -> list[str]:
        """The configured secrets (see :meth:`api_token_specs` for names and scopes)."""
        return [t.secret for t in self.api_token_specs()]

    def api_token_specs(self) -> tuple[ApiToken, ...]:
        """``AUDITREC_API_TOKENS`` parsed (:mod:`consumers.runtime.tokens`); a malformed entry
        is a :class:`ConfigError` naming it."""
        if self.api_tokens is None:
            return ()
        return parse_tokens(self.api_tokens.get_secret_value())


# AUDITREC_* variables that are not settings: the simulator's, and the project's own tooling's
# (`make test`, `make chaos`, `make fuzz`, scripts/services.sh).
OTHER_VARIABLES = frozenset(
    {
        "AUDITREC_SIMULATOR_TOKEN",
        "AUDITREC_REQUIRE_SERVICES",
        "AUDITREC_SERVICES_DIR",
        "AUDITREC_KAFKA_HEAP",
        "AUDITREC_WRITE_PLAN",
    }
)
OTHER_PREFIXES = ("AUDITREC_TEST_", "AUDITREC_CHAOS_", "AUDITREC_FUZZ_")


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
    """Settings from the environment; a bad value raises :class:`ConfigError` naming it; an
    ``AUDITREC_*`` variable that is no setting is reported (a warning)."""
    for problem in unknown_variables(os.environ):
        log.warning(problem)
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            name = "AUDITREC_" + "_".join(str(p) for p in err["loc"]).upper()
            problems.append(f"{name}: {err['msg']}")
        raise ConfigError("invalid configuration: " + "; ".join(problems)) from None
