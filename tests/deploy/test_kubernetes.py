"""deploy/kubernetes: the manifests parse, kustomize lists them all, their settings are
auditrec's, and each Deployment's probes name a port and a path its command serves; run as
the manifest says (on the embedded backends), the process answers each probe."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from consumers.runtime.names import COMPONENTS
from consumers.runtime.settings import Settings
from consumers.workflows.simulator.server import SimulatorServer
from tests.consumers.api.conftest import free_port
from tests.deploy.conftest import DEPLOY, ROOT
from tests.eventually import eventually_sync

MANIFESTS = DEPLOY / "kubernetes"
TEMPLATES = {"secret.example.yaml"}  # applied by hand, never by kustomize
AUDITREC = str(Path(sys.executable).with_name("auditrec"))
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d is not None]


def manifests() -> list[dict[str, Any]]:
    files = sorted(p.name for p in MANIFESTS.glob("*.yaml"))
    return [d for f in files if f != "kustomization.yaml" for d in documents(f)]


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in manifests() if d["kind"] == kind]


def config() -> dict[str, str]:
    (configmap,) = of_kind("ConfigMap")
    data: dict[str, str] = configmap["data"]
    return data


def secret_template() -> dict[str, str]:
    (secret,) = of_kind("Secret")
    data: dict[str, str] = secret["stringData"]
    return data


def containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = workload["spec"]["template"]["spec"]["containers"]
    return found


def components(container: dict[str, Any]) -> list[str]:
    args = container["args"]
    assert args[0] == "serve"
    return args[args.index("--only") + 1].split(",") if "--only" in args else list(COMPONENTS)


def served(container: dict[str, Any]) -> dict[int, set[str]]:
    """Port → paths the container's `auditrec serve` answers (docs/reference: HTTP API, metrics)."""
    settings = settings_of(config())
    if "api" in components(container):
        return {settings.api_port: {"/healthz", "/readyz", "/metrics"}}
    return {settings.metrics_port: {"/metrics"}}


def settings_of(env: dict[str, str]) -> Settings:
    names = {f"AUDITREC_{field.upper()}" for field in Settings.model_fields}
    assert set(env) <= names, f"not auditrec settings: {sorted(set(env) - names)}"
    values = {k.removeprefix("AUDITREC_").lower(): v for k, v in env.items() if v != ""}
    return Settings(**values)


def container_port(container: dict[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    (number,) = [p["containerPort"] for p in container["ports"] if p["name"] == port]
    return int(number)


def test_every_manifest_parses_and_kustomize_lists_it() -> None:
    (kustomization,) = documents("kustomization.yaml")
    listed = set(kustomization["resources"])
    files = {p.name for p in MANIFESTS.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == files - TEMPLATES
    for doc in manifests():
        assert doc["apiVersion"] and doc["metadata"]["name"].startswith("auditrec")
    kinds = sorted(d["kind"] for d in manifests())
    assert kinds == [
        "ConfigMap",
        "Deployment",
        "Deployment",
        "Deployment",
        "Job",
        "Secret",
        "Service",
    ]


def test_the_settings_are_auditrecs_and_valid() -> None:
    settings = settings_of({**config(), **secret_template()})
    assert settings.api_host == "0.0.0.0"
    assert settings.event_log_url.startswith("kafka://")
    assert settings.database_url.startswith("postgresql://")


def test_every_workload_runs_the_image_with_the_config_and_the_secret() -> None:
    (kustomization,) = documents("kustomization.yaml")
    assert [i["name"] for i in kustomization["images"]] == ["auditrec"]
    assert "docker build -t auditrec ." in (ROOT / "Dockerfile").read_text()
    for workload in of_kind("Deployment") + of_kind("Job"):
        for container in containers(workload):
            assert container["image"] == "auditrec"
            refs = {next(iter(ref.values()))["name"] for ref in container["envFrom"]}
            assert refs == {"auditrec-config", "auditrec-secrets"}
            assert container["resources"]["requests"], workload["metadata"]["name"]
    (job,) = of_kind("Job")
    assert [c["args"] for c in containers(job)] == [["init"]]


def test_the_deployments_run_every_component_once() -> None:
    run = [c for d in of_kind("Deployment") for c in containers(d) for c in components(c)]
    assert sorted(run) == sorted(COMPONENTS)


def test_the_event_subscription_runs_apart_and_is_off_until_its_queue_is_named() -> None:
    # the subscriber and the confirmer in a Deployment of their own; the pipeline's command
    # does not depend on the queue being set
    by_name = {d["metadata"]["name"]: d for d in of_kind("Deployment")}
    (subscriber,) = containers(by_name["auditrec-subscriber"])
    assert components(subscriber) == ["subscriber", "confirmer"]
    (pipeline,) = containers(by_name["auditrec-pipeline"])
    assert not {"subscriber", "confirmer"} & set(components(pipeline))
    # the queue is named in the ConfigMap (read by the pipeline's watchdog too), empty: off
    assert config()["AUDITREC_CLOUDFLARE_QUEUE_ID"] == ""
    assert settings_of(config()).cloudflare_queue_id is None
    # its own token is optional: empty, the API token pulls
    assert secret_template()["AUDITREC_CLOUDFLARE_QUEUES_TOKEN"] == ""


def test_each_deployments_probes_name_a_port_and_a_path_it_serves() -> None:
    for deployment in of_kind("Deployment"):
        for container in containers(deployment):
            answers = served(container)
            assert {"livenessProbe", "readinessProbe"} <= container.keys()
            for kind in PROBES:
                if kind not in container:
                    continue
                get = container[kind]["httpGet"]
                port = container_port(container, get["port"])
                assert get["path"] in answers.get(port, set()), (container["name"], kind)
            # liveness must not hang on dependencies: never /readyz
            assert container["livenessProbe"]["httpGet"]["path"] != "/readyz"
            annotations = deployment["spec"]["template"]["metadata"]["annotations"]
            assert annotations["prometheus.io/scrape"] == "true"
            assert "/metrics" in answers[int(annotations["prometheus.io/port"])]
            assert annotations["prometheus.io/path"] == "/metrics"


def test_the_api_service_selects_the_api_pods_on_its_port() -> None:
    (service,) = of_kind("Service")
    (api,) = [d for d in of_kind("Deployment") if "api" in components(containers(d)[0])]
    labels = api["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    (port,) = service["spec"]["ports"]
    assert container_port(containers(api)[0], port["targetPort"]) == settings_of(config()).api_port


def run_as_the_manifest_says(
    name: str,
    simulator: SimulatorServer,
    tmp_path: Path,
    metrics_show: Callable[[str], bool] = lambda _: True,
    **extra: str,
) -> str:
    """Run the Deployment ``name``'s command with its settings (and ``extra``) on the embedded
    backends and free ports, check that it answers every probe of the manifest, wait until its
    /metrics show what ``metrics_show`` looks for, stop it (it must exit 0), and give those
    metrics."""
    (deployment,) = [d for d in of_kind("Deployment") if d["metadata"]["name"] == name]
    (container,) = containers(deployment)
    settings = settings_of(config())
    ports = {settings.api_port: free_port(), settings.metrics_port: free_port()}
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUDITREC_")}
    env.update({k: v for k, v in {**config(), **secret_template()}.items() if v})
    env.update(
        AUDITREC_EVENT_LOG_URL=f"sqlite:///{tmp_path}/events.db",
        AUDITREC_DATABASE_URL=f"sqlite:///{tmp_path}/audits.db",
        AUDITREC_API_HOST="127.0.0.1",
        AUDITREC_API_PORT=str(ports[settings.api_port]),
        AUDITREC_METRICS_PORT=str(ports[settings.metrics_port]),
        AUDITREC_CLOUDFLARE_API_URL=simulator.url,
        AUDITREC_CLOUDFLARE_ACCOUNT_ID="acct-1",
        AUDITREC_INSTANCE_ID=f"{name}-0",
        **extra,
    )
    init = subprocess.run([AUDITREC, "init"], env=env, capture_output=True, text=True, timeout=60)
    assert init.returncode == 0, init.stderr

    # when it runs
    log_file = tmp_path / "serve.log"
    with log_file.open("w") as sink:
        serve = subprocess.Popen([AUDITREC, *container["args"]], env=env, stdout=sink, stderr=sink)
        try:
            # then every probe of the manifest gets 200 from it
            for kind in PROBES:
                if kind not in container:
                    continue
                get = container[kind]["httpGet"]
                url = f"http://127.0.0.1:{ports[container_port(container, get['port'])]}"

                def status(url: str = url + get["path"]) -> int | None:
                    try:
                        return httpx.get(url, timeout=5).status_code
                    except httpx.TransportError:
                        return None

                answered = eventually_sync(
                    status, until=lambda s: s == 200, timeout=60, interval=0.2, message=kind
                )
                assert answered == 200
            metrics_url = f"http://127.0.0.1:{ports[settings.metrics_port]}/metrics"
            if "api" in components(container):
                metrics_url = f"http://127.0.0.1:{ports[settings.api_port]}/metrics"
            exposition = eventually_sync(
                lambda: httpx.get(metrics_url, timeout=5).text,
                until=metrics_show,
                timeout=30,
                interval=0.2,
                message="the metrics looked for",
            )
        finally:
            serve.terminate()
            try:
                serve.wait(timeout=30)
            except subprocess.TimeoutExpired:
                serve.kill()
                serve.wait()
    assert serve.returncode == 0, log_file.read_text()[-3000:]
    return exposition


@pytest.mark.parametrize("name", ["auditrec-api", "auditrec-pipeline", "auditrec-subscriber"])
def test_run_as_the_manifest_says_the_process_answers_its_probes(
    name: str, simulator: SimulatorServer, tmp_path: Path
) -> None:
    run_as_the_manifest_says(name, simulator, tmp_path)


def pulls(exposition: str) -> dict[str, float]:
    """The subscriber's pulls by outcome, from a /metrics exposition."""
    found: dict[str, float] = {}
    for line in exposition.splitlines():
        if line.startswith("auditrec_subscription_pulls_total{"):
            outcome = line.split('outcome="', 1)[1].split('"', 1)[0]
            found[outcome] = float(line.rsplit(" ", 1)[1])
    return found


def test_the_subscriber_pod_pulls_its_queue_once_the_queue_is_named(
    simulator: SimulatorServer, tmp_path: Path
) -> None:
    # given the subscriber Deployment with the ConfigMap's queue id set, on a Workflows API
    # that serves that queue (the simulator's, subscribed to every workflow's events)
    simulator.sim.add_queue("site-audit-events")

    # when it runs, then it answers its probes and pulls the queue (empty: no workflow ran)
    exposition = run_as_the_manifest_says(
        "auditrec-subscriber",
        simulator,
        tmp_path,
        metrics_show=lambda text: pulls(text).get("empty", 0) >= 1,
        AUDITREC_CLOUDFLARE_QUEUE_ID="site-audit-events",
    )
    assert set(pulls(exposition)) == {"empty"}
    (last,) = [
        line
        for line in exposition.splitlines()
        if line.startswith("auditrec_subscription_last_pull_timestamp_seconds ")
    ]
    assert float(last.rsplit(" ", 1)[1]) > 0
    assert 'auditrec_component_healthy{component="confirmer"} 1.0' in exposition


def test_the_subscriber_pod_stays_up_while_its_pulls_fail(
    simulator: SimulatorServer, tmp_path: Path
) -> None:
    # given the subscriber Deployment with a queue id the account does not have (every pull
    # fails), then the pod still answers its probes (no restart loop: the
    # AuditrecSubscriptionPullFailing alert says it) and exits 0 when stopped
    exposition = run_as_the_manifest_says(
        "auditrec-subscriber",
        simulator,
        tmp_path,
        metrics_show=lambda text: bool(pulls(text)),
        AUDITREC_CLOUDFLARE_QUEUE_ID="no-such-queue",
    )
    assert set(pulls(exposition)) == {"not_found"}


def test_the_api_fails_closed_while_the_secrets_token_is_empty(tmp_path: Path) -> None:
    # given the API Deployment as the manifest says (on 0.0.0.0), with the example Secret's
    # AUDITREC_API_TOKENS left empty, and a Secret that is not optional
    (deployment,) = [d for d in of_kind("Deployment") if d["metadata"]["name"] == "auditrec-api"]
    (container,) = containers(deployment)
    assert all(ref["secretRef"].get("optional") is False for ref in container["envFrom"][1:])
    assert secret_template()["AUDITREC_API_TOKENS"] == ""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUDITREC_")}
    env.update({k: v for k, v in {**config(), **secret_template()}.items() if v})
    env.update(
        AUDITREC_EVENT_LOG_URL=f"sqlite:///{tmp_path}/events.db",
        AUDITREC_DATABASE_URL=f"sqlite:///{tmp_path}/audits.db",
        AUDITREC_API_PORT="0",
    )

    # when the pod starts, then serve stops at once, naming the variable to set
    started = subprocess.run(
        [AUDITREC, *container["args"]], env=env, capture_output=True, text=True, timeout=60
    )
    assert started.returncode == 2, started.stderr[-2000:]
    assert "AUDITREC_API_TOKENS" in started.stderr and "0.0.0.0" in started.stderr
