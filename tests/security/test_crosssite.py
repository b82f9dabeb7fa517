"""What a web page of another site can make the operator's browser send to a default API (no
tokens, on loopback), and what it gets: requests a page may send without a CORS preflight are
refused (415), names other than the API's own are refused (421, DNS rebinding), and nothing
grants a page of another origin a read (no CORS headers). Against a real server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from consumers.workflows.simulator.server import SimulatorServer
from tests.consumers.api.conftest import LiveServer, server_settings, started, unique

EVIL = "rebind.evil.example"


def test_a_text_plain_post_of_events_is_refused_and_publishes_nothing(
    open_api: LiveServer,
) -> None:
    audit_id = unique("forged")
    body = json.dumps([started(audit_id)])  # valid: only its content type is wrong
    with open_api.client() as client:
        # what a <form enctype="text/plain"> or fetch(..., {mode: "no-cors"}) sends
        refused = client.post("/events", content=body, headers={"content-type": "text/plain"})
        history = client.get(f"/audits/{audit_id}/events")

    assert refused.status_code == 415
    assert "application/json" in refused.json()["detail"]
    assert history.status_code == 404


@pytest.mark.parametrize(
    "path",
    [
        "/sweep",
        "/brake/release",
        "/brake/discard",
        "/dead-letters/0:0/replay",
        "/dead-letters/purge",
    ],
)
@pytest.mark.parametrize(
    "content_type", [None, "application/x-www-form-urlencoded", "multipart/form-data; b=x"]
)
def test_a_post_without_a_json_content_type_is_refused_bodiless_ones_too(
    open_api: LiveServer, path: str, content_type: str | None
) -> None:
    headers = {"content-type": content_type} if content_type else {}
    with open_api.client() as client:
        refused = client.post(path, headers=headers)
        asked = client.post(
            path, params={"dry_run": "true"}, headers={"content-type": "application/json"}
        )

    assert refused.status_code == 415, refused.text
    assert asked.status_code != 415


def test_no_answer_grants_another_origin_anything(open_api: LiveServer) -> None:
    origin = {"origin": "https://evil.example"}
    with open_api.client() as client:
        preflight = client.options(
            "/events",
            headers={
                **origin,
                "access-control-request-method": "POST",
                "access-control-request-headers": "content-type",
            },
        )
        read = client.get("/audits", headers=origin)

    for answer in (preflight, read):
        assert not [h for h in answer.headers if h.lower().startswith("access-control-")]
    assert preflight.status_code >= 400


def test_the_console_keeps_its_own_form_posts(open_api: LiveServer) -> None:
    with open_api.client() as client:
        form = client.post("/ui/login", data={"token": "x"})

    assert form.status_code != 415


@pytest.mark.parametrize("host", [EVIL, f"{EVIL}:8080", "127.0.0.2", "[::2]:80"])
def test_a_rebound_name_gets_421_from_an_api_without_tokens(
    open_api: LiveServer, host: str
) -> None:
    with open_api.client() as client:
        read = client.get("/audits", headers={"host": host})
        console = client.get("/ui/audits", headers={"host": host})
        write = client.post("/sweep", headers={"host": host, "content-type": "application/json"})

    assert (read.status_code, console.status_code, write.status_code) == (421, 421, 421)
    assert "AUDITREC_API_ALLOWED_HOSTS" in read.json()["detail"]


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST:8080", "127.0.0.1", "[::1]:8080"])
def test_the_loopback_names_are_answered(open_api: LiveServer, host: str) -> None:
    with open_api.client() as client:
        assert client.get("/audits", headers={"host": host}).status_code == 200


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics"])
def test_health_and_metrics_answer_any_host(open_api: LiveServer, path: str) -> None:
    with open_api.client() as client:
        answer = client.get(path, headers={"host": "10.1.2.3:8080"})

    assert answer.status_code in (200, 503)  # /readyz: 503 while no pipeline runs


def test_allowed_hosts_name_the_api_and_tokens_end_the_check(
    tmp_path: Path, simulator: SimulatorServer
) -> None:
    token = "ops-0123456789abcdef"
    for folder in ("named", "tokened"):
        (tmp_path / folder).mkdir()
    named = server_settings(tmp_path / "named", simulator, api_allowed_hosts="auditrec-api")
    tokened = server_settings(tmp_path / "tokened", simulator, api_tokens=f"ops:{token}:operate")
    with LiveServer(["api"], **named) as live, live.client() as client:
        assert client.get("/audits", headers={"host": "auditrec-api:8080"}).status_code == 200
        assert client.get("/audits", headers={"host": "localhost"}).status_code == 421
    with LiveServer(["api"], **tokened) as live, live.client(token) as client:
        assert client.get("/audits", headers={"host": EVIL}).status_code == 200


def test_no_answer_may_be_framed_or_sniffed_and_the_console_allows_only_its_own_origin(
    open_api: LiveServer,
) -> None:
    with open_api.client() as client:
        answers = {
            "api": client.get("/healthz"),
            "refused": client.post("/sweep"),  # a 415 made before any route
            "console": client.get("/ui/login"),
            "console style": client.get("/ui/static/console.css"),
        }

    for name, answer in answers.items():
        assert answer.headers["x-frame-options"] == "DENY", name
        assert answer.headers["x-content-type-options"] == "nosniff", name
        assert answer.headers["referrer-policy"] == "no-referrer", name
    policy = answers["console"].headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy and "script-src 'self'" in policy
    assert "'unsafe-inline'" not in policy
    assert "content-security-policy" not in answers["api"].headers
