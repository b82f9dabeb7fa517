"""``auditrec demo``: a scripted end-to-end run on the embedded default.

It starts the Workflows simulator, publishes a realistic mix of audits (healthy, killed by OOM,
timed out, terminated, expired from retention, finished but never finalized, never attached,
young, already completed, one whose probe fails: the API answers 500 for its instance, so the
sweep counts a probe error and decides nothing), shows the table, sweeps, shows it again,
overturns one failure with a late completion, and replays one audit's history. Then, with the
simulator's queue as the event subscription, it runs the components for real, kills one more
audit's instance and says how many seconds passed until the audit was failed from the queue.
Last, the table as it ends, and the count of its failed audits.

With ``serve_port`` (``auditrec demo --serve``) it does not end there: the simulator keeps
running, and so does every component of ``serve`` on the demo's files, the API on 127.0.0.1
with an ``operate`` token made for this run and printed once, until SIGINT or SIGTERM.
"""

from __future__ import annotations

import asyncio
import secrets
import tempfile
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from consumers.cli.assembly import Service, operations
from consumers.operations.backends import Backends
from consumers.runtime.names import COMPONENTS, PIPELINE
from consumers.runtime.settings import load_settings
from consumers.workflows.simulator.server import DEFAULT_WORKFLOW, SimulatorServer
from projections.private import private_dirs
from projections.row import AuditRow
from statemachine.events import EVENT_ADAPTER, AuditEvent

__all__ = ["run_demo"]

ERRORS: dict[str, Any] = {
    "oom": {"name": "Error", "message": "Worker exceeded memory limit"},
    "timeout": {"name": "WorkflowTimeoutError", "message": "Execution timed out after 1800000ms"},
    "d1": "D1_ERROR: Failed query: SELECT * FROM pages (SQLITE_BUSY)",
}

# audit id, workflow status (None: no instance), error, minutes since start, attach instance
SCENARIO: list[tuple[str, str | None, Any, int, bool]] = [
    ("demo-healthy", "running", None, 120, True),
    ("demo-oom", "errored", ERRORS["oom"], 95, True),
    ("demo-timeout", "errored", ERRORS["timeout"], 240, True),
    ("demo-db", "errored", ERRORS["d1"], 60, True),
    ("demo-terminated", "terminated", None, 45, True),
    ("demo-expired", None, None, 60 * 24 * 9, True),
    ("demo-finalize", "complete", None, 180, True),
    ("demo-unattached", None, None, 50, False),
    ("demo-young", None, None, 5, True),
    ("demo-flaky", "errored", ERRORS["oom"], 70, True),  # the API answers 500 for it
    ("demo-done", "complete", None, 200, True),
]


def _event(kind: str, audit_id: str, at: datetime, data: dict[str, Any]) -> AuditEvent:
    return EVENT_ADAPTER.validate_python(
        {
            "event_id": str(uuid.uuid4()),
            "type": kind,
            "audit_id": audit_id,
            "occurred_at": at,
            "producer": "crawler",
            "data": data,
        }
    )


def _events(now: datetime) -> list[AuditEvent]:
    events = []
    for i, (audit_id, _status, _error, minutes, attach) in enumerate(SCENARIO):
        started = now - timedelta(minutes=minutes)
        data: dict[str, Any] = {
            "project_id": f"proj-{i % 3 + 1}",
            "organization_id": "org-acme",
            "started_by_user_id": f"user-{i % 2 + 1}",
            "start_url": f"https://{audit_id.removeprefix('demo-')}.example.com/",
            "pages_total": 250,
        }
        if attach:
            data["workflow_instance_id"] = f"wf-{audit_id}"
        events.append(_event("AuditStarted", audit_id, started, data))
        events.append(
            _event(
                "AuditProgressed",
                audit_id,
                started + timedelta(minutes=min(3, minutes // 2)),
                {"current_phase": "crawl", "pages_crawled": 40 + i * 7},
            )
        )
        if audit_id == "demo-done":
            events.append(
                _event(
                    "AuditCompleted",
                    audit_id,
                    started + timedelta(minutes=30),
                    {"pages_crawled": 250},
                )
            )
    return events


QUEUE = "demo-events"  # the simulator's queue the event subscription publishes to
RECEIVER = "product"  # the simulator's webhook receiver standing for the product
SECRET = "whsec_ZGVtby1vdXRjb21lLWZlZWQtc2lnbmluZy1zZWNyZXQ="  # the demo's only; never reuse
LIVE = "demo-live"  # the audit whose instance the demo kills while everything runs
DETECTION_LIMIT = 30.0  # seconds the demo waits for the queue to tell


def _table(rows: list[AuditRow], title: str) -> Table:
    table = Table(title=title, title_justify="left", box=None, pad_edge=False)
    for col in (
        "audit_id",
        "status",
        "phase",
        "error_code",
        "failed_by",
        "reconciled_by",
        "last observed",
    ):
        table.add_column(col)
    for row in sorted(rows, key=lambda r: r.audit_id):
        s = row.state
        status = s.status + (" (overturned)" if s.overturned else "")
        style = {"failed": "red", "completed": "green"}.get(s.status, "yellow")
        table.add_row(
            s.audit_id,
            f"[{style}]{status}[/{style}]",
            s.current_phase or "",
            s.error_code or "",
            s.failed_by or "",
            s.reconciled_by or "",
            s.last_observed_status or "",
        )
    return table


async def _detect_from_the_queue(server: SimulatorServer, backends: Backends, out: Console) -> int:
    """Every component running, the simulator publishing status changes to the queue: kill
    one audit's instance and time its failure; the audits failed (1, or 0 in no time)."""
    sim = server.sim
    sim.add_queue(QUEUE, workflows=[DEFAULT_WORKFLOW])
    instance = f"wf-{LIVE}"
    sim.set_instance(instance, "running", start=datetime.now(UTC) - timedelta(minutes=2))
    started = _event(
        "AuditStarted",
        LIVE,
        datetime.now(UTC) - timedelta(minutes=2),
        {"project_id": "proj-1", "start_url": "https://live.example.com/",
         "workflow_instance_id": instance},
    )  # fmt: skip
    poll = backends.settings.subscription_poll.total_seconds()
    async with Service(backends, [*PIPELINE, "subscriber", "confirmer", "outcomes"]) as service:
        running = asyncio.create_task(service.run())
        try:
            await operations(backends).publish([started])
            await _status(backends, LIVE, "running")
            out.print(f"  {LIVE} runs; the subscriber pulls queue {QUEUE} every {poll:g} s")
            asked = sim.requests_for(instance)
            killed = time.monotonic()
            sim.set_instance(instance, "errored", error=ERRORS["oom"])
            row = await _status(backends, LIVE, "failed")
            took = time.monotonic() - killed
            asked = sim.requests_for(instance) - asked
            received = await _received(sim, LIVE)
        finally:
            service.stopping.set()
            await running
    if row is None:
        out.print(f"  {LIVE}: no failure within {DETECTION_LIMIT:g} s")
        return 0
    out.print(
        f"  {LIVE} killed by OOM: detected from the event subscription in {took:.1f} s "
        f"(failed, {row.state.error_code}, reconciled_by {row.state.reconciled_by}; "
        f"Workflows API requests to confirm it: {asked})",
        highlight=False,
    )
    kinds = Counter(d["body"]["type"] for d in received)
    out.print(
        f"  the product's webhook received {len({d['id'] for d in received})} signed outcomes "
        f"({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))}), "
        f"{'every signature valid' if all(d['verified'] for d in received) else 'SOME UNSIGNED'}; "
        f"the last: {LIVE} failed {row.state.error_code}",
        highlight=False,
    )
    return 1


async def _received(sim: Any, audit_id: str) -> list[dict[str, Any]]:
    """What the product's receiver accepted, once it holds ``audit_id``'s failure (or after
    :data:`DETECTION_LIMIT`)."""
    deadline = time.monotonic() + DETECTION_LIMIT
    while True:
        got = [d for d in sim.webhooks.get(RECEIVER)["deliveries"] if d["status"] < 300]
        if time.monotonic() > deadline or any(
            d["body"]["audit_id"] == audit_id and d["body"]["type"] == "audit.failed" for d in got
        ):
            return got
        await asyncio.sleep(0.05)


async def _status(backends: Backends, audit_id: str, status: str) -> AuditRow | None:
    """The audit's row once it has ``status`` (``None`` after :data:`DETECTION_LIMIT`)."""
    deadline = time.monotonic() + DETECTION_LIMIT
    while time.monotonic() < deadline:
        row = await backends.store.audits.get(audit_id)
        if row is not None and row.status == status:
            return row
        await asyncio.sleep(0.05)
    return None


async def _serve(server: SimulatorServer, config: dict[str, Any], port: int, out: Console) -> int:
    """Every component on the demo's files and simulator, the API on 127.0.0.1:``port`` with
    an ``operate`` token made now and printed once, until SIGINT or SIGTERM."""
    token = secrets.token_urlsafe(24)
    settings = load_settings(
        **config, api_host="127.0.0.1", api_port=port, api_tokens=f"demo:{token}:operate"
    )
    async with Backends(settings) as backends, Service(backends, COMPONENTS) as service:
        service.install_signal_handlers()
        url = f"http://127.0.0.1:{port}"
        out.print(
            "\n[bold]serving[/bold]: every component on the demo's files, the Workflows API "
            f"simulator at {server.url}",
            highlight=False,
        )
        out.print(f"  console  {url}/ui", highlight=False)
        out.print(
            f"  API      {url} (Authorization: Bearer <token>; e.g. GET /audits?status=failed)",
            highlight=False,
        )
        out.print(
            f"  token    {token}  (scope operate; made for this run and shown only now)",
            highlight=False,
        )
        out.print("  Ctrl-C stops it", highlight=False)
        await service.run()
    return 0


async def run_demo(work_dir: Path | None, out: Console, serve_port: int | None = None) -> int:
    temp = None
    if work_dir is None:
        temp = tempfile.TemporaryDirectory(prefix="auditrec-demo-")
        work_dir = Path(temp.name)
    private_dirs(work_dir)
    now = datetime.now(UTC)
    try:
        async with SimulatorServer() as server:
            sim = server.sim
            for audit_id, status, error, minutes, _attach in SCENARIO:
                if status is None:
                    continue
                end = None
                if status in ("complete", "errored", "terminated"):
                    end = now - timedelta(minutes=max(1, minutes // 3))
                sim.set_instance(
                    f"wf-{audit_id}",
                    status,
                    error=error,
                    start=now - timedelta(minutes=minutes),
                    end=end,
                )
            sim.set_fault("wf-demo-flaky", "server_error")
            sim.add_webhook(RECEIVER, SECRET)
            config: dict[str, Any] = dict(
                event_log_url=f"sqlite:///{work_dir}/events.db",
                database_url=f"sqlite:///{work_dir}/audits.db",
                cloudflare_api_url=server.url,
                cloudflare_account_id="demo-account",
                cloudflare_queue_id=QUEUE,
                posthog_api_key=None,
                webhook_urls=f"{server.root_url}/_sim/webhooks/{RECEIVER}",
                webhook_secret=SECRET,
            )
            settings = load_settings(**config)
            out.print(f"[bold]auditrec demo[/bold] — event log and projection in {work_dir}")
            out.print(f"Workflows API simulator at {server.url}\n")
            async with Backends(settings) as backends:
                for endpoint in settings.outcome_endpoints():  # as `auditrec init` does
                    await backends.store.deliveries.register(
                        endpoint.name, endpoint.target, datetime.now(UTC)
                    )
                ops = operations(backends)
                events = _events(now)
                await ops.publish(events)
                out.print(f"published {len(events)} lifecycle events for {len(SCENARIO)} audits")
                async with Service(backends, ["projector"]) as service:
                    await service.drain()
                out.print(
                    _table(await backends.store.audits.list_audits(limit=100), "\nbefore the sweep")
                )

                summary = (await ops.sweep(inline=True)).as_dict()
                failed = ", ".join(f"{k} {v}" for k, v in sorted(summary["failed"].items()))
                errors = ", ".join(f"{k} {v}" for k, v in sorted(summary["probe_errors"].items()))
                out.print(
                    f"\n[bold]sweep[/bold]: {summary['candidates']} stale candidates, "
                    f"{summary['probed']} probed, failed: {failed}; healthy {summary['healthy']}, "
                    f"unchanged {summary['unchanged']}, probe errors "
                    f"{sum(summary['probe_errors'].values())} ({errors or 'none'}: nothing is "
                    "decided on a failed probe)"
                )
                out.print(
                    _table(await backends.store.audits.list_audits(limit=100), "\nafter the sweep")
                )

                out.print("\nthe crawler of demo-finalize reports completion at last:")
                await ops.publish(
                    [
                        _event(
                            "AuditCompleted",
                            "demo-finalize",
                            datetime.now(UTC),
                            {"pages_crawled": 250},
                        )
                    ]
                )
                async with Service(backends, PIPELINE) as service:
                    await service.drain()
                row = await backends.store.audits.get("demo-finalize")
                assert row is not None
                out.print(f"  demo-finalize is now {row.status}, overturned={row.state.overturned}")

                out.print("\n[bold]auditrec replay demo-oom[/bold]")
                for step in await ops.replay("demo-oom"):
                    out.print(
                        f"  {step.event.type:<24} {step.before:>9} → {step.after:<9} "
                        f"[cyan]{step.rule}[/cyan]: {step.reason}",
                        highlight=False,
                    )

                out.print(
                    "\n[bold]detection in seconds[/bold]: the event subscription's queue, and "
                    "the outcomes pushed to the product's webhook"
                )
                await _detect_from_the_queue(server, backends, out)
                rows = await backends.store.audits.list_audits(limit=100)
            out.print(_table(rows, "\nas it ends"))
            codes = Counter(r.state.error_code for r in rows if r.status == "failed")
            out.print(
                f"\n{sum(codes.values())} dead audits failed with a classified code "
                f"({', '.join(f'{k} {v}' for k, v in sorted(codes.items()))}); "
                f"{sum(1 for r in rows if r.state.overturned)} failure overturned by a late "
                "completion",
                highlight=False,
            )
            if temp is None:
                out.print(
                    f"try `auditrec --event-log-url sqlite:///{work_dir}/events.db "
                    f"--database-url sqlite:///{work_dir}/audits.db replay demo-young`",
                    highlight=False,
                )
            if serve_port is not None:
                return await _serve(server, config, serve_port, out)
            return 0
    finally:
        if temp is not None:
            temp.cleanup()
