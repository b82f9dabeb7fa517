"""Settings from the environment (``AUDITREC_*``) and overrides: durations as ``15m``/``90s``/
``1h`` or seconds, defaults as DESIGN §4, §5 and §7 give them, and errors that name the
variable."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta

import pytest

from consumers.runtime.settings import Settings, load_settings, unknown_variables
from statemachine.errors import ConfigError


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No ``AUDITREC_*`` variable from the environment the tests run in."""
    for name in list(os.environ):
        if name.startswith("AUDITREC_"):
            monkeypatch.delenv(name)
    yield


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("15m", timedelta(minutes=15)),
        ("90s", timedelta(seconds=90)),
        ("1h", timedelta(hours=1)),
        ("1h30m", timedelta(minutes=90)),
        ("250ms", timedelta(milliseconds=250)),
        ("45", timedelta(seconds=45)),
        ("2.5", timedelta(seconds=2.5)),
        (" 10M ", timedelta(minutes=10)),
    ],
)
def test_a_duration_variable_takes_units_or_seconds(
    monkeypatch: pytest.MonkeyPatch, text: str, expected: timedelta
) -> None:
    monkeypatch.setenv("AUDITREC_STALE_RUNNING_AFTER", text)
    assert load_settings().stale_running_after == expected


def test_every_threshold_is_read_from_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    # given each duration and limit set in the environment
    for name, value in {
        "STALE_RUNNING_AFTER": "20m", "INSTANCE_LOST_GRACE": "5m", "FINALIZE_GRACE": "2m",
        "WATCHDOG_INTERVAL": "90s", "WATCHDOG_BATCH_LIMIT": "7", "ON_DEMAND_MIN_INTERVAL": "1m",
        "ON_DEMAND_WAIT": "4s", "PROBE_BUDGET": "50", "PROBE_BUDGET_WINDOW": "1h",
        "PROBE_CONCURRENCY": "3", "MODE": "shadow",
    }.items():  # fmt: skip
        monkeypatch.setenv(f"AUDITREC_{name}", value)

    # when the settings are loaded
    settings = load_settings()

    # then each has its value, and the policy carries the thresholds and the mode
    assert (settings.watchdog_interval, settings.watchdog_batch_limit) == (timedelta(seconds=90), 7)
    assert (settings.on_demand_min_interval, settings.on_demand_wait) == (
        timedelta(minutes=1), timedelta(seconds=4),
    )  # fmt: skip
    assert (settings.probe_budget, settings.probe_budget_window, settings.probe_concurrency) == (
        50, timedelta(hours=1), 3,
    )  # fmt: skip
    policy = settings.policy()
    assert (policy.stale_running_after, policy.instance_lost_grace, policy.finalize_grace) == (
        timedelta(minutes=20), timedelta(minutes=5), timedelta(minutes=2),
    )  # fmt: skip
    assert policy.shadow is True


def test_an_override_wins_over_the_environment_and_none_means_unset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AUDITREC_TOPIC_PREFIX", "from-env")
    assert load_settings(topic_prefix="from-flag").topic_prefix == "from-flag"
    assert load_settings(topic_prefix=None).topic_prefix == "from-env"


def test_the_defaults_are_the_documented_ones() -> None:
    settings = load_settings()
    assert (
        settings.stale_running_after,
        settings.instance_lost_grace,
        settings.finalize_grace,
        settings.watchdog_interval,
        settings.watchdog_batch_limit,
    ) == (timedelta(minutes=15), timedelta(minutes=10), timedelta(minutes=10),
          timedelta(minutes=5), 100)  # fmt: skip
    assert (settings.on_demand_min_interval, settings.on_demand_wait) == (
        timedelta(seconds=30), timedelta(seconds=3),
    )  # fmt: skip
    assert (settings.probe_budget, settings.probe_budget_window, settings.probe_concurrency) == (
        1000, timedelta(minutes=5), 8,
    )  # fmt: skip
    assert settings.on_demand_budget_share == 0.5
    assert (settings.watchdog_budget_floor, settings.watchdog_reserve()) == (0.3, 300)
    assert settings.event_log_url == "sqlite:///.auditrec/events.db"
    assert settings.database_url == "sqlite:///.auditrec/audits.db"
    assert settings.topic_prefix == "audit"
    assert settings.cloudflare_api_url == "https://api.cloudflare.com/client/v4"
    assert settings.mode == "enforce" and settings.policy().shadow is False
    assert settings.posthog_api_key is None and settings.api_token_list() == []


@pytest.mark.parametrize(
    ("variable", "value", "complaint"),
    [
        ("STALE_RUNNING_AFTER", "soon", "not a duration"),
        ("INSTANCE_LOST_GRACE", "-5", "cannot be negative"),
        ("WATCHDOG_INTERVAL", "5 minutes", "not a duration"),
        ("WATCHDOG_BATCH_LIMIT", "0", "greater than or equal to 1"),
        ("PROBE_CONCURRENCY", "many", "integer"),
        ("ON_DEMAND_BUDGET_SHARE", "0", "greater than 0"),
        ("ON_DEMAND_BUDGET_SHARE", "1.5", "less than or equal to 1"),
        ("ON_DEMAND_BUDGET_SHARE", "half", "number"),
        ("WATCHDOG_BUDGET_FLOOR", "1", "less than 1"),
        ("WATCHDOG_BUDGET_FLOOR", "-0.1", "greater than or equal to 0"),
        ("EVENT_LOG_URL", "mysql://db", "sqlite:/// or kafka://"),
        ("DATABASE_URL", "redis://x", "sqlite:/// or postgresql://"),
        ("CLOUDFLARE_API_URL", "ftp://x", "http:// or https://"),
        ("TOPIC_PREFIX", "no spaces allowed", "pattern"),
        ("MODE", "lenient", "enforce"),
    ],
)
def test_an_invalid_value_is_refused_naming_its_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, complaint: str
) -> None:
    monkeypatch.setenv(f"AUDITREC_{variable}", value)
    with pytest.raises(ConfigError) as err:
        load_settings()
    message = str(err.value)
    assert message.startswith(f"invalid configuration: AUDITREC_{variable}: ")
    assert complaint in message


def test_every_invalid_value_is_named_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUDITREC_STALE_RUNNING_AFTER", "soon")
    monkeypatch.setenv("AUDITREC_PROBE_BUDGET", "0")
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert "AUDITREC_STALE_RUNNING_AFTER" in str(err.value)
    assert "AUDITREC_PROBE_BUDGET" in str(err.value)


def test_secrets_are_not_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUDITREC_CLOUDFLARE_API_TOKEN", "cf-token-secret")
    monkeypatch.setenv("AUDITREC_API_TOKENS", "tok-one-0123456789, tok-two-0123456789")
    settings = load_settings()
    assert "cf-token-secret" not in repr(settings) and "tok-one-0123456789" not in repr(settings)
    assert settings.cloudflare_api_token is not None
    assert settings.cloudflare_api_token.get_secret_value() == "cf-token-secret"
    assert settings.api_token_list() == ["tok-one-0123456789", "tok-two-0123456789"]


def test_settings_are_frozen() -> None:
    settings = load_settings()
    with pytest.raises(ValueError):
        settings.topic_prefix = "other"  # type: ignore[misc]
    assert isinstance(settings, Settings)


def test_a_misspelled_variable_is_reported_with_the_closest_known_name() -> None:
    environ = {
        "AUDITREC_WATCHDOG_INTERVALL": "5m",
        "AUDITREC_PROBE_BUDGET": "10",  # a setting
        "AUDITREC_SIMULATOR_TOKEN": "t",  # the simulator's
        "AUDITREC_TEST_KAFKA": "k",  # the project's test tooling
        "AUDITREC_NOTHING_LIKE_IT": "x",
        "OTHER_VARIABLE": "y",
    }
    assert unknown_variables(environ) == [
        "unknown variable AUDITREC_NOTHING_LIKE_IT",
        "unknown variable AUDITREC_WATCHDOG_INTERVALL (did you mean AUDITREC_WATCHDOG_INTERVAL?)",
    ]


def test_an_unknown_variable_refuses_the_settings_naming_the_closest_known_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AUDITREC_PROBE_BUDGT", "3")
    with pytest.raises(ConfigError) as refused:
        load_settings()
    assert refused.value.exit_code == 2
    assert "unknown variable AUDITREC_PROBE_BUDGT (did you mean AUDITREC_PROBE_BUDGET?)" in str(
        refused.value
    )


@pytest.mark.parametrize(
    "variable",
    [
        "AUDITREC_SIMULATOR_TOKEN",  # simulate-workflows --token
        "AUDITREC_URL",  # the clients' examples
        "AUDITREC_TOKEN",
        "AUDITREC_PRINCIPAL",  # deploy/kafka/acls.sh
        "AUDITREC_REQUIRE_SERVICES",  # make test
        "AUDITREC_SCREENSHOTS_DIR",  # make screenshots
        "AUDITREC_CHAOS_KILLS",  # make chaos
        "AUDITREC_FUZZ_EXAMPLES",  # make fuzz
        "AUDITREC_TEST_KAFKA",
        "AUDITREC_SERVICES_DIR",  # scripts/services.sh
        "AUDITREC_KAFKA_HEAP",
        "AUDITREC_WRITE_PLAN",
    ],
)
def test_the_projects_own_variables_that_are_no_settings_are_not_refused(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "1")
    assert load_settings().probe_budget == 1000


@pytest.mark.parametrize(
    ("overrides", "refused"),
    [
        ({}, False),
        ({"api_host": "localhost"}, False),
        ({"api_host": "127.0.0.5"}, False),
        ({"api_host": "::1"}, False),
        ({"api_host": "0.0.0.0"}, True),
        ({"api_host": "::"}, True),
        ({"api_host": "10.0.0.7"}, True),
        ({"api_host": "api.internal"}, True),  # a name may resolve anywhere
        ({"api_host": "0.0.0.0", "api_allow_open": "true"}, False),
        ({"api_host": "0.0.0.0", "api_tokens": "ops:0123456789abcdef:operate"}, False),
        ({"api_tokens": "ops:0123456789abcde:operate"}, True),  # 15 characters
    ],
)
def test_the_api_runs_without_tokens_on_loopback_only_unless_allowed(
    overrides: dict[str, str], refused: bool
) -> None:
    refusal = load_settings(**overrides).api_refusal()

    assert (refusal is not None) == refused, refusal
    if refused:
        assert "AUDITREC_API_TOKENS" in (refusal or "")
        assert "0123456789abcde" not in (refusal or "")


def test_the_allowed_hosts_are_the_loopback_names_by_default() -> None:
    assert load_settings().allowed_hosts() == {"localhost", "127.0.0.1", "[::1]"}
    custom = load_settings(api_allowed_hosts="Auditrec-API., localhost ,")
    assert custom.allowed_hosts() == {"auditrec-api", "localhost"}


@pytest.mark.parametrize(
    ("share", "floor", "budget", "reserve", "reads"),
    [("1", "0.3", "1000", 300, 700), ("0.5", "0.3", "1000", 300, 500), ("1", "0", "10", 0, 10),
     ("0.9", "0.25", "10", 3, 7), ("0.5", "0.5", "3", 2, 1)],
)  # fmt: skip
def test_status_reads_take_at_most_their_share_within_the_watchdog_floor(
    monkeypatch: pytest.MonkeyPatch, share: str, floor: str, budget: str, reserve: int, reads: int
) -> None:
    monkeypatch.setenv("AUDITREC_ON_DEMAND_BUDGET_SHARE", share)
    monkeypatch.setenv("AUDITREC_WATCHDOG_BUDGET_FLOOR", floor)
    monkeypatch.setenv("AUDITREC_PROBE_BUDGET", budget)
    settings = load_settings()
    assert (settings.watchdog_reserve(), settings.on_demand_cap()) == (reserve, reads)


def test_a_floor_that_leaves_status_reads_nothing_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AUDITREC_WATCHDOG_BUDGET_FLOOR", "0.9")
    monkeypatch.setenv("AUDITREC_PROBE_BUDGET", "5")
    with pytest.raises(ConfigError) as err:
        load_settings()
    message = str(err.value)
    assert message.startswith("invalid configuration: AUDITREC_WATCHDOG_BUDGET_FLOOR: ")
    assert "AUDITREC_PROBE_BUDGET=5" in message and "AUDITREC_ON_DEMAND_BUDGET_SHARE" in message


def test_the_watched_and_terminable_workflows_are_read_from_their_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AUDITREC_CLOUDFLARE_WORKFLOW", "site-audit")
    monkeypatch.setenv("AUDITREC_CLOUDFLARE_WORKFLOWS", "keyword-research, site-export site-audit")
    s = load_settings()
    assert s.watched_workflows() == ("site-audit", "keyword-research", "site-export")
    assert s.terminate_workflow_names() == {"site-audit", "keyword-research", "site-export"}
    assert s.policy().may_terminate("keyword-research") is False  # stalls report by default

    monkeypatch.setenv("AUDITREC_TERMINATE_WORKFLOWS", "none")
    monkeypatch.setenv("AUDITREC_STALLED_ACTION", "terminate")
    assert load_settings().terminate_workflow_names() == frozenset()
    monkeypatch.setenv("AUDITREC_TERMINATE_WORKFLOWS", "site-export")
    policy = load_settings().policy()
    assert policy.may_terminate("site-export") and not policy.may_terminate(None)


@pytest.mark.parametrize(
    "variable", ["AUDITREC_CLOUDFLARE_WORKFLOWS", "AUDITREC_TERMINATE_WORKFLOWS"]
)
def test_a_malformed_workflow_name_is_refused_naming_its_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "good, not/a/name")
    with pytest.raises(ConfigError, match=f"{variable}.*'not/a/name' is not a workflow name"):
        load_settings()
