"""What the command line prints: the consoles (stdout for results, stderr for messages),
JSON, the audit table and the replay timeline."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.table import Table

from projections.row import AuditRow

if TYPE_CHECKING:
    from statemachine.explain import Step

__all__ = ["audits_table", "err", "out", "print_json", "replay_table"]

out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


def audits_table(rows: list[AuditRow]) -> Table:
    table = Table(box=None, pad_edge=False)
    for col in ("audit_id", "status", "phase", "pages", "started", "error_code", "by", "last seen"):
        table.add_column(col)
    for row in rows:
        s = row.state
        pages = (
            f"{s.pages_crawled or 0}/{s.pages_total}"
            if s.pages_total
            else str(s.pages_crawled or "")
        )
        table.add_row(
            s.audit_id,
            s.status
            + (" (overturned)" if s.overturned else "")
            + (" (held)" if s.held_decision_id else "")
            + (" (stalled)" if s.stalled_at else ""),
            s.current_phase or "",
            pages,
            s.started_at.strftime("%Y-%m-%d %H:%M:%S") if s.started_at else "",
            s.error_code or "",
            (f"{s.failed_by}/{s.reconciled_by}" if s.reconciled_by else s.failed_by) or "",
            s.last_observed_status or "",
        )
    return table


def replay_table(audit_id: str, steps: Sequence[Step]) -> Table:
    table = Table(box=None, pad_edge=False, title=f"audit {audit_id}")
    for col in ("#", "occurred_at", "event", "before → after", "rule", "why"):
        table.add_column(col, overflow="fold")
    for i, s in enumerate(steps, 1):
        table.add_row(
            str(i),
            s.event.occurred_at.strftime("%Y-%m-%d %H:%M:%S"),
            s.event.type,
            f"{s.before} → {s.after}",
            s.rule,
            s.reason,
        )
    return table
