"""Instances for orphan tests, made through the Workflows simulator's control routes, and the
orphan metrics read back."""

from __future__ import annotations

from datetime import datetime
from urllib.parse import quote

import httpx

from consumers.runtime.metrics import REGISTRY
from consumers.workflows.simulator.server import SimulatorServer

__all__ = ["instance", "orphans_metric", "pages_metric", "patches"]


def _path(workflow: str, instance_id: str) -> str:
    return f"/_sim/workflows/{quote(workflow, safe='')}/instances/{quote(instance_id, safe='')}"


async def instance(
    sim: SimulatorServer, workflow: str, instance_id: str, status: str, created: datetime
) -> None:
    """An instance of ``workflow`` created (queued) at ``created``."""
    async with httpx.AsyncClient(base_url=sim.root_url) as http:
        answer = await http.put(
            _path(workflow, instance_id),
            json={"status": status, "queued": created.isoformat(), "start": created.isoformat()},
        )
    assert answer.status_code == 200, answer.text


async def patches(sim: SimulatorServer, workflow: str, instance_id: str) -> tuple[int, str]:
    """How many status PATCHes the instance received, and its status."""
    async with httpx.AsyncClient(base_url=sim.root_url) as http:
        answer = await http.get(_path(workflow, instance_id))
    assert answer.status_code == 200, answer.text
    view = answer.json()
    return sum(view["patches"].values()), view["status"]


def orphans_metric(workflow: str) -> float | None:
    return REGISTRY.get_sample_value("auditrec_orphans", {"workflow": workflow})


def pages_metric(workflow: str) -> float:
    labels = {"workflow": workflow}
    return REGISTRY.get_sample_value("auditrec_orphan_scan_pages_total", labels) or 0.0
