"""The checks of the HTTP services auditrec talks to: the Workflows API (one cheap
authenticated call: token, account and workflow) and the PostHog host (telemetry)."""

from __future__ import annotations

import httpx

from consumers.operations.doctor.report import CHECK_TIMEOUT, Check
from consumers.runtime.settings import Settings
from consumers.workflows.answers import PROBABLE_CAUSE
from consumers.workflows.client import WorkflowsClient

__all__ = ["POSTHOG_DEFAULT_HOST", "check_posthog", "check_workflows"]

POSTHOG_DEFAULT_HOST = "https://us.i.posthog.com"  # the SDK's when AUDITREC_POSTHOG_HOST is unset


async def check_workflows(settings: Settings, timeout: float = CHECK_TIMEOUT) -> Check:
    name = "workflows api"
    blind = settings.probing_blind()
    if blind is not None:
        return Check(name, False, "probing is blind", blind)
    token = settings.cloudflare_api_token
    client = WorkflowsClient(
        api_url=settings.cloudflare_api_url,
        account_id=settings.account_id,
        workflow=settings.cloudflare_workflow,
        api_token=token.get_secret_value() if token is not None else None,
        concurrency=1,
        timeout=min(timeout, settings.probe_timeout.total_seconds()),
        max_retries=0,
    )
    async with client:
        failure = await client.check()
    what = (
        f"workflow {settings.cloudflare_workflow!r} of account {settings.account_id!r} "
        f"at {settings.cloudflare_api_url}"
    )
    if failure is None:
        return Check(name, True, f"{what} answers")
    return Check(
        name,
        False,
        f"{what}: {failure.reason.value}: {failure.detail}",
        PROBABLE_CAUSE.get(failure.reason, "check the AUDITREC_CLOUDFLARE_* settings"),
    )


async def check_posthog(settings: Settings, timeout: float = CHECK_TIMEOUT) -> Check:
    """Any HTTP answer from the host means it is reachable (the key is not checked: PostHog's
    capture endpoints accept any key)."""
    name = "posthog"
    if settings.posthog_api_key is None:
        return Check(name, True, "telemetry off (AUDITREC_POSTHOG_API_KEY unset)")
    host = settings.posthog_host or POSTHOG_DEFAULT_HOST
    try:
        async with httpx.AsyncClient(timeout=timeout) as http:
            response = await http.get(host + "/")
    except httpx.HTTPError as exc:
        return Check(
            name,
            False,
            f"{host} unreachable: {type(exc).__name__}: {exc}",
            "check AUDITREC_POSTHOG_HOST and the network, or unset AUDITREC_POSTHOG_API_KEY "
            "to turn telemetry off",
        )
    return Check(name, True, f"{host} answers (HTTP {response.status_code})")
