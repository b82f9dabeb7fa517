"""deploy/prometheus: the rules pass promtool's check and their unit tests, refer only to
metrics the code exposes, and every alert is tested both firing and silent."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from statemachine.events import ProbeFailureReason
from tests.deploy.conftest import DEPLOY
from tests.deploy.promql import TARGET_LABELS, exposed, references

RULES = DEPLOY / "prometheus" / "alerts.yml"
RULES_TEST = DEPLOY / "prometheus" / "alerts_test.yml"
SEVERITIES = {"critical", "warning", "info"}


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def rules() -> list[dict[str, Any]]:
    groups = load(RULES)["groups"]
    return [rule for group in groups for rule in group["rules"]]


def alerts() -> list[dict[str, Any]]:
    return [rule for rule in rules() if "alert" in rule]


def test_promtool_check_rules_passes(promtool: str) -> None:
    result = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout


def test_promtool_unit_tests_pass(promtool: str) -> None:
    result = subprocess.run(
        [promtool, "test", "rules", RULES_TEST.name],
        cwd=RULES_TEST.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_alerts_live_in_group_auditrec_with_a_severity_and_a_runbook() -> None:
    groups = load(RULES)["groups"]
    assert [g["name"] for g in groups] == ["auditrec"]
    names = [a["alert"] for a in alerts()]
    assert len(names) == len(set(names))
    for alert in alerts():
        assert alert["labels"]["severity"] in SEVERITIES, alert["alert"]
        annotations = alert["annotations"]
        assert annotations["summary"].strip(), alert["alert"]
        assert "Check" in annotations["description"], alert["alert"]
        assert "Fix" in annotations["description"], alert["alert"]


def test_the_expected_alerts_are_defined() -> None:
    assert {a["alert"] for a in alerts()} >= {
        "AuditrecWatchdogNotTicking",
        "AuditrecConsumerStalled",
        "AuditrecProbeFailuresDominating",
        "AuditrecProbeBudgetExhausted",
        "AuditrecProbeRateLimited",
        "AuditrecBrakeEngaged",
        "AuditrecAuditsStalled",
        "AuditrecRetentionAtRisk",
        "AuditrecDeadLetters",
        "AuditrecDeadLettersKept",
        "AuditrecComponentUnhealthy",
        "AuditrecSubscriptionSilent",
        "AuditrecSubscriptionPullFailing",
        "AuditrecConfirmationsBacklog",
        "AuditrecOutcomesParked",
        "AuditrecOutcomesFailing",
    }


def test_every_alert_is_unit_tested_firing_and_silent() -> None:
    fired: set[str] = set()
    silent: set[str] = set()
    for case in load(RULES_TEST)["tests"]:
        for check in case.get("alert_rule_test", []):
            (fired if check.get("exp_alerts") else silent).add(check["alertname"])
    names = {a["alert"] for a in alerts()}
    assert names - fired == set(), "alerts never tested firing"
    assert names - silent == set(), "alerts never tested silent"


def test_rule_expressions_refer_only_to_exposed_metrics_and_their_labels() -> None:
    names = exposed()
    recorded = {rule["record"] for rule in rules() if "record" in rule}
    for rule in rules():
        what = rule.get("alert") or rule.get("record")
        refs = references(rule["expr"])
        assert refs.unknown == set(), (what, refs.unknown)
        assert refs.metrics, what
        assert refs.metrics - names.keys() - recorded == set(), what
        for metric, labels in refs.matchers.items():
            allowed = names.get(metric, frozenset()) | TARGET_LABELS
            assert labels <= allowed, (what, metric, labels - allowed)
        used = set().union(*(names.get(m, frozenset()) for m in refs.metrics))
        assert refs.grouping <= used | TARGET_LABELS, (what, refs.grouping - used)


def test_the_failure_ratio_counts_exactly_the_probe_failure_reasons() -> None:
    (ratio,) = [r for r in rules() if r.get("record") == "auditrec:probe_failure_ratio:rate15m"]
    matcher = ratio["expr"].split('outcome=~"', 1)[1].split('"', 1)[0]
    assert set(matcher.split("|")) == {reason.value for reason in ProbeFailureReason}


@pytest.mark.parametrize(
    ("expr", "metrics", "grouping"),
    [
        (
            'sum by (le) (rate(x_bucket{a="1",b=~"x|y"}[5m])) / on (job) y offset 1h',
            {"x_bucket", "y"},
            {"le", "job"},
        ),
        ("time() - max(max_over_time(z[$__rate_interval]))", {"z"}, set()),
    ],
)
def test_references_finds_metrics_and_labels(
    expr: str, metrics: set[str], grouping: set[str]
) -> None:
    refs = references(expr)
    assert refs.metrics == metrics
    assert refs.grouping == grouping
    assert refs.unknown == set()
