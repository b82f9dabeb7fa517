"""Property-based run of the OpenAPI schema (schemathesis) against a live server: no request
the schema allows — or that schemathesis derives from it to be invalid — gets a 5xx, and every
answer conforms to the documented responses.

The server runs with tokens (the fuzzer sends a valid one) and a pipeline, against the Workflows
simulator, with a few audits in place so that reads hit real rows too.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from consumers.workflows.simulator.server import SimulatorServer

from .conftest import API_AND_PIPELINE, LiveServer, publish, server_settings, started

TOKEN = "fuzz-token-0123456789"
EXAMPLES = int(os.environ.get("AUDITREC_FUZZ_EXAMPLES", "25"))


@pytest.fixture(scope="module")
def fuzz_server(
    tmp_path_factory: pytest.TempPathFactory, _simulator_server: SimulatorServer
) -> Iterator[LiveServer]:
    tmp: Path = tmp_path_factory.mktemp("fuzz")
    overrides = server_settings(tmp, _simulator_server, api_tokens=TOKEN, on_demand_wait="1s")
    with LiveServer(API_AND_PIPELINE, **overrides) as server:
        server.wait_pipeline_live()
        _simulator_server.sim.set_instance("wf-a-123", "running")
        with server.client(TOKEN) as client:
            publish(client, started("a-123"), started("a-456", minutes_ago=1, attach=False))
        yield server


@pytest.fixture(scope="module")
def api_schema(fuzz_server: LiveServer) -> Any:
    return schemathesis.openapi.from_url(
        f"{fuzz_server.url}/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"}
    )


OPERATIONS = [
    ("GET", "/audits/{audit_id}"),
    ("GET", "/audits"),
    ("GET", "/audits/{audit_id}/events"),
    ("POST", "/events"),
    ("POST", "/sweep"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
    ("GET", "/brake"),
    ("POST", "/brake/release"),
    ("POST", "/brake/discard"),
    ("GET", "/dead-letters"),
    ("GET", "/dead-letters/{position}"),
    ("POST", "/dead-letters/{position}/replay"),
    ("GET", "/backtest"),
    ("POST", "/audits/{audit_id}/fail"),
    ("POST", "/audits/{audit_id}/restore"),
    ("POST", "/audits/{audit_id}/probe"),
    ("POST", "/audits/fail"),
    ("POST", "/audits/restore"),
    ("POST", "/dead-letters/purge"),
    ("GET", "/deliveries"),
    ("POST", "/deliveries/retry"),
    ("GET", "/orphans"),
    ("GET", "/orphans/{workflow}/{instance_id}"),
    ("POST", "/orphans/{workflow}/{instance_id}/terminate"),
]
# The others have nothing a negative case could break.
WITH_INPUT = [
    *OPERATIONS[:4],
    ("POST", "/brake/release"),
    ("POST", "/brake/discard"),
    *OPERATIONS[11:15],
    *OPERATIONS[-11:],
]
WITHOUT_BODY = {
    "/sweep",
    "/brake/release",
    "/brake/discard",
    "/dead-letters/{position}/replay",
    "/audits/{audit_id}/probe",
    "/orphans/{workflow}/{instance_id}/terminate",
}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def test_the_schema_lists_every_operation(api_schema: Any) -> None:
    found = {(op.ok().method.upper(), op.ok().path) for op in api_schema.get_all_operations()}
    assert found == set(OPERATIONS)


# schemathesis' own pytest plugin (``from_fixture``) does not run under pytest 9 yet, so the
# cases are drawn with hypothesis from each operation's strategy.
@pytest.mark.parametrize(
    ("method", "path", "mode"),
    [(m, p, GenerationMode.POSITIVE) for m, p in OPERATIONS]
    + [(m, p, GenerationMode.NEGATIVE) for m, p in WITH_INPUT],
)
def test_no_server_errors(api_schema: Any, method: str, path: str, mode: GenerationMode) -> None:
    operation = api_schema[path][method]
    headers = {"Authorization": f"Bearer {TOKEN}"}
    if method == "POST" and path in WITHOUT_BODY:
        headers["Content-Type"] = "application/json"  # what every POST needs (else 415)

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
    )
    def run(case: Any) -> None:
        case.call_and_validate(headers=headers, timeout=15, checks=CHECKS)

    run()
