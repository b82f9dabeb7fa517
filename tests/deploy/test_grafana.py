"""deploy/grafana/auditrec.json: a dashboard Grafana imports as is, over a ``${datasource}``
variable, whose queries name only metrics (and labels) the code exposes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from tests.deploy.conftest import DEPLOY
from tests.deploy.promql import TARGET_LABELS, exposed, family_of, references

DASHBOARD = DEPLOY / "grafana" / "auditrec.json"


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def queries(board: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for panel in panels(board):
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


def test_the_dashboard_is_a_current_grafana_dashboard() -> None:
    board = dashboard()
    assert board["title"] == "auditrec"
    assert 36 <= board["schemaVersion"] <= 41
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids))
    for panel in panels(board):
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]


def test_no_two_panels_overlap() -> None:
    placed: list[tuple[str, int, int, int, int]] = []
    for panel in panels(dashboard()):
        grid = panel["gridPos"]
        box = (panel["title"], grid["x"], grid["y"], grid["x"] + grid["w"], grid["y"] + grid["h"])
        for other in placed:
            apart = (
                box[3] <= other[1] or other[3] <= box[1] or box[4] <= other[2] or other[4] <= box[2]
            )
            assert apart, (box[0], other[0])
        placed.append(box)


def test_the_datasource_is_a_variable_never_a_fixed_uid() -> None:
    board = dashboard()
    (variable,) = [v for v in board["templating"]["list"] if v["name"] == "datasource"]
    assert (variable["type"], variable["query"]) == ("datasource", "prometheus")

    def datasources(node: object) -> Iterator[dict[str, Any]]:
        if isinstance(node, dict):
            if isinstance(node.get("datasource"), dict):
                yield node["datasource"]
            for value in node.values():
                yield from datasources(value)
        elif isinstance(node, list):
            for value in node:
                yield from datasources(value)

    for ds in datasources(board["panels"]):
        assert ds == {"type": "prometheus", "uid": "${datasource}"}
    for panel in panels(board):
        if panel["type"] != "row":
            assert panel["targets"], panel["title"]


def test_every_query_names_only_exposed_metrics_and_their_labels() -> None:
    names = exposed()
    for title, expr in queries(dashboard()):
        refs = references(expr)
        assert refs.unknown == set(), (title, refs.unknown)
        assert refs.metrics, title
        assert refs.metrics <= names.keys(), (title, refs.metrics - names.keys())
        used = set().union(*(names[m] for m in refs.metrics))
        assert refs.grouping <= used | TARGET_LABELS, (title, refs.grouping - used)
        for metric, labels in refs.matchers.items():
            assert labels <= names[metric] | TARGET_LABELS, (title, metric)


def test_the_dashboard_shows_what_an_operator_needs() -> None:
    shown = {family_of(m) for _, expr in queries(dashboard()) for m in references(expr).metrics}
    assert shown >= {
        "auditrec_audits",
        "auditrec_audits_stale_running",
        "auditrec_audits_stalled",
        "auditrec_audits_retention_at_risk",
        "auditrec_oldest_running_age_seconds",
        "auditrec_decisions",
        "auditrec_observations_judged",
        "auditrec_watchdog_ticks",
        "auditrec_watchdog_last_tick_timestamp_seconds",
        "auditrec_watchdog_tick_duration_seconds",
        "auditrec_probe_request_duration_seconds",
        "auditrec_probe_budget_left",
        "auditrec_probe_pauses",
        "auditrec_consumer_lag_records",
        "auditrec_consumer_last_progress_timestamp_seconds",
        "auditrec_dead_letters",
        "auditrec_http_requests",
        "auditrec_http_request_duration_seconds",
        "auditrec_brake_engaged",
        "auditrec_decisions_held",
        "auditrec_component_healthy",
        "auditrec_build",
        "auditrec_detection_seconds",
        "auditrec_subscription_messages",
        "auditrec_subscription_pulls",
        "auditrec_subscription_backlog_messages",
        "auditrec_subscription_confirmations_waiting",
        "auditrec_subscription_oldest_unacked_age_seconds",
        "auditrec_subscription_last_pull_timestamp_seconds",
        "auditrec_outcomes",
        "auditrec_outcomes_waiting",
        "auditrec_outcomes_parked",
        "auditrec_outcome_delay_seconds",
    }
