"""The documentation site's reference tables (docs/hooks.py, run by ``make docs``) name
everything the code has: every setting, metric, command, event type and route; and every
setting has a description to show."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import click
import pytest

from consumers.cli.main import main
from consumers.runtime.metrics import REGISTRY
from consumers.runtime.settings import Settings
from statemachine.events import EVENT_TYPES

HOOKS = Path(__file__).resolve().parents[1] / "docs" / "hooks.py"


@pytest.fixture(scope="module")
def hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks", HOOKS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_setting_is_in_the_configuration_table_with_its_description(
    hooks: ModuleType,
) -> None:
    page = hooks.configuration()
    for name, field in Settings.model_fields.items():
        assert f"`AUDITREC_{name.upper()}`" in page
        assert field.description, f"{name} has no docstring"


def test_every_metric_is_in_the_metrics_table(hooks: ModuleType) -> None:
    page = hooks.metrics()
    names = [family.name for family in REGISTRY.collect()]
    assert len(names) > 20
    for name in names:
        assert f"`{name}" in page


def test_every_command_has_its_help_in_the_cli_page(hooks: ModuleType) -> None:
    page = hooks.cli()
    ctx = click.Context(main, info_name="auditrec")
    for name in main.list_commands(ctx):
        assert f"`auditrec {name}`" in page
    assert "Usage: auditrec brake release [OPTIONS]" in page


def test_every_event_type_and_route_is_documented(hooks: ModuleType) -> None:
    events = hooks.events()
    for name in EVENT_TYPES:
        assert f"### `{name}`" in events
    routes = hooks.http()
    for path in ("/audits/{audit_id}", "/events", "/healthz", "/brake/release"):
        assert f"[`{path}`]" in routes
    assert "| `POST` | [`/events`](#post-events) | `publish` |" in routes
    assert "| `GET` | [`/healthz`](#get-healthz) | `none` |" in routes


def test_an_unknown_marker_fails_the_build(hooks: ModuleType) -> None:
    class File:
        src_uri = "reference/x.md"

    class Page:
        file = File()

    with pytest.raises(Exception, match="no reference table named 'nothing'"):
        hooks.on_page_markdown("<!-- reference: nothing -->\n", Page(), None, None)
