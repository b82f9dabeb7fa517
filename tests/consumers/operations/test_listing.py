"""The statuses the listing filters offer are the machine's, wherever they are offered."""

from __future__ import annotations

import click

from consumers.api.action_models import BulkFail
from consumers.cli.main import main
from consumers.operations.listing import AUDIT_STATUSES
from statemachine.machine import TRANSITIONS


def test_the_filters_offer_every_status_a_transition_leads_to() -> None:
    assert set(AUDIT_STATUSES) == {row["dest"] for row in TRANSITIONS}


def test_the_cli_and_the_bulk_bodies_offer_the_same_statuses() -> None:
    for command in ("audits", "fail", "restore"):
        [option] = [p for p in main.commands[command].params if p.name in ("status", "status_")]
        assert isinstance(option.type, click.Choice)
        assert tuple(option.type.choices) == AUDIT_STATUSES
    offered = BulkFail.model_json_schema()["properties"]["status"]["anyOf"][0]["enum"]
    assert tuple(offered) == AUDIT_STATUSES
