"""The shipped ways to run auditrec fail closed, read as they are written (no Docker engine or
cluster is needed) and run as processes: the image (``Dockerfile``) and ``docker compose``
listen on all interfaces and never set ``AUDITREC_API_ALLOW_OPEN``, so their start command,
given an empty token, stops with exit 2 naming ``AUDITREC_API_TOKENS``; ``docker compose``
publishes only on loopback; and the Kubernetes ConfigMap lets an API run open on purpose be
reached by the API Service's in-cluster names only (any other ``Host`` is answered 421)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import httpx
import yaml

from consumers.runtime.settings import Settings
from tests.deploy.conftest import ROOT
from tests.deploy.test_kubernetes import MANIFESTS, components, config, containers, of_kind
from tests.e2e.serving import AUDITREC
from tests.security.conftest import serving

START = 60.0  # were the refusal missing, the command would run until this timeout


def environment(tmp_path: Path, given: dict[str, str]) -> dict[str, str]:
    """A process's environment: none of this one's ``AUDITREC_*``, ``given``, the embedded
    backends in ``tmp_path`` (no Kafka or PostgreSQL container here), ``auditrec`` on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUDITREC_")}
    env.update(given)
    env.update(
        AUDITREC_EVENT_LOG_URL=f"sqlite:///{tmp_path}/events.db",
        AUDITREC_DATABASE_URL=f"sqlite:///{tmp_path}/audits.db",
        AUDITREC_API_PORT="0",
        PATH=f"{Path(AUDITREC).parent}{os.pathsep}{env.get('PATH', '')}",
    )
    return env


def refused(result: subprocess.CompletedProcess[str]) -> None:
    """The start was refused: exit 2, naming the variable to set and the open switch."""
    assert result.returncode == 2, (result.stdout + result.stderr)[-3000:]
    assert "AUDITREC_API_TOKENS" in result.stderr and "0.0.0.0" in result.stderr
    assert "Traceback" not in result.stderr


# -- the image ---------------------------------------------------------------------------------


def dockerfile() -> list[tuple[str, str]]:
    """The Dockerfile's instructions (continuation lines joined, comments dropped)."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def image_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for word, rest in dockerfile():
        if word == "ENV":
            env.update(dict(pair.split("=", 1) for pair in shlex.split(rest)))
    return env


def image_command() -> list[str]:
    (entrypoint,) = [json.loads(r) for w, r in dockerfile() if w == "ENTRYPOINT"]
    (cmd,) = [json.loads(r) for w, r in dockerfile() if w == "CMD"]
    return [*entrypoint, *cmd]


def test_the_image_listens_everywhere_never_opens_itself_and_refuses_an_empty_token(
    tmp_path: Path,
) -> None:
    # given the image's settings and start command, as the Dockerfile says
    env, command = image_env(), image_command()
    assert env["AUDITREC_API_HOST"] == "0.0.0.0"
    assert not any(k in env for k in ("AUDITREC_API_ALLOW_OPEN", "AUDITREC_API_TOKENS"))
    assert command == ["auditrec", "serve"]

    # when the container starts with an empty token (`docker run -e AUDITREC_API_TOKENS=`)
    started = subprocess.run(
        command,
        env=environment(tmp_path, {**env, "AUDITREC_API_TOKENS": ""}),
        capture_output=True,
        text=True,
        timeout=START,
    )

    # then serve stops at once, naming what to set
    refused(started)


# -- docker compose ----------------------------------------------------------------------------


def compose_service() -> dict[str, Any]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    service: dict[str, Any] = compose["services"]["auditrec"]
    return service


def interpolate(value: str, shell: dict[str, str]) -> str:
    """``${NAME}`` and ``${NAME:-default}`` as ``docker compose`` reads them from ``shell``."""

    def one(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(3)
        found = shell.get(name, "")
        return found if found or default is None else default

    return re.sub(r"\$\{(\w+)(:-([^}]*))?\}", one, value)


def test_compose_publishes_on_loopback_never_opens_the_api_and_refuses_an_empty_token(
    tmp_path: Path,
) -> None:
    # given the compose file's auditrec service
    service = compose_service()
    assert all(str(port).startswith("127.0.0.1:") for port in service["ports"])
    declared = service["environment"]
    assert declared["AUDITREC_API_HOST"] == "0.0.0.0"
    # the token and the open switch come only from whoever runs compose, empty by default
    assert re.fullmatch(r"\$\{AUDITREC_API_TOKENS(:-)?\}", declared["AUDITREC_API_TOKENS"])
    assert re.fullmatch(r"\$\{AUDITREC_API_ALLOW_OPEN(:-)?\}", declared["AUDITREC_API_ALLOW_OPEN"])
    command = [*service["entrypoint"], *service["command"]]
    assert command[-1].endswith("exec auditrec serve")

    for shell in ({}, {"AUDITREC_API_TOKENS": ""}):
        # when `docker compose up` runs its command with no token (or an empty one)
        env = {k: interpolate(str(v), shell) for k, v in declared.items()}
        started = subprocess.run(
            command,
            env=environment(tmp_path, env),
            capture_output=True,
            text=True,
            timeout=START,
        )

        # then `auditrec init` ran, and serve stopped, naming what to set
        refused(started)


# -- Kubernetes --------------------------------------------------------------------------------


def namespace() -> str:
    """Where kustomize puts the resources: its ``namespace:``, else the context's default."""
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    return str(kustomization.get("namespace") or "default")


def api_services() -> list[str]:
    """The Services that select the API's pods."""
    (api,) = [d for d in of_kind("Deployment") if "api" in components(containers(d)[0])]
    labels = api["spec"]["template"]["metadata"]["labels"]
    return [
        s["metadata"]["name"]
        for s in of_kind("Service")
        if s["spec"]["selector"].items() <= labels.items()
    ]


def test_the_configmap_allows_the_api_services_in_cluster_names() -> None:
    allowed = Settings(_env_file=None, api_allowed_hosts=config()["AUDITREC_API_ALLOWED_HOSTS"])
    names = allowed.allowed_hosts()
    assert "*" not in names
    ns = namespace()
    (service,) = api_services()
    assert {service, f"{service}.{ns}.svc", f"{service}.{ns}.svc.cluster.local"} <= names


def test_an_open_api_with_the_configmaps_hosts_answers_its_names_only(
    env: dict[str, str], tmp_path: Path
) -> None:
    # given serve as the ConfigMap sets it, on loopback and open (no token in the Secret)
    hosts = config()["AUDITREC_API_ALLOWED_HOSTS"]
    (service,) = api_services()
    open_env = {**env, "AUDITREC_API_ALLOWED_HOSTS": hosts}
    with serving(open_env, tmp_path / "serve.log", "--only", "api") as url:
        port = url.rsplit(":", 1)[1]

        def status(host: str) -> int:
            return httpx.get(f"{url}/audits", headers={"Host": host}, timeout=5).status_code

        # then each in-cluster name of the Service is answered
        for name in (
            service,
            f"{service}.{namespace()}.svc",
            f"{service}.{namespace()}.svc.cluster.local",
        ):
            assert status(f"{name}:{port}") == 200, name
        # and a name an attacker's DNS points at the pod is not (DNS rebinding)
        assert status(f"rebound.attacker.example:{port}") == 421
        assert status(f"{service}.attacker.example") == 421
