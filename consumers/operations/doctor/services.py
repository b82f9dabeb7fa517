"""The checks of the HTTP services auditrec talks to: the Workflows API (one cheap
authenticated call: token, account and workflow), the event subscription's queue (its metadata,
never a pull) and the PostHog host (telemetry)."""

from __future__ import annotations

import httpx

from consumers.operations.doctor.report import CHECK_TIMEOUT, Check
from consumers.runtime.settings import Settings
from consumers.workflows.answers import PROBABLE_CAUSE
from consumers.workflows.client import WorkflowsClient
from consumers.workflows.queues import QueueClient, QueueFailure

__all__ = [
    "POSTHOG_DEFAULT_HOST",
    "check_outcomes",
    "check_posthog",
    "check_subscription",
    "check_workflows",
]

POSTHOG_DEFAULT_HOST = "https://us.i.posthog.com"  # the SDK's when AUDITREC_POSTHOG_HOST is unset


async def check_workflows(settings: Settings, timeout: float = CHECK_TIMEOUT) -> Check:
    name = "workflows api"
    blind = settings.probing_blind()
    if blind is not None:
        return Check(name, False, "probing is blind", blind, refused=True)
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
    workflows = settings.watched_workflows()
    async with client:
        for workflow in workflows:  # each watched workflow must exist, not only the default
            failure = await client.check(workflow=workflow)
            if failure is not None:
                break
    names = ", ".join(repr(w) for w in workflows)
    what = (
        f"workflow{'s' if len(workflows) > 1 else ''} {names} of account "
        f"{settings.account_id!r} at {settings.cloudflare_api_url}"
    )
    if failure is None:
        return Check(name, True, f"{what} answer{'' if len(workflows) > 1 else 's'}")
    return Check(
        name,
        False,
        f"workflow {workflow!r}: {failure.reason.value}: {failure.detail}",
        PROBABLE_CAUSE.get(failure.reason, "check the AUDITREC_CLOUDFLARE_* settings")
        + (" (and AUDITREC_CLOUDFLARE_WORKFLOWS)" if len(workflows) > 1 else ""),
    )


_QUEUE_CAUSE = {
    "unauthorized": "the token lacks Queues permission: give AUDITREC_CLOUDFLARE_QUEUES_TOKEN "
    "(or the API token) Queues read and write",
    "not_found": "no such queue in this account: check AUDITREC_CLOUDFLARE_QUEUE_ID (the queue's "
    "id, not its name) and AUDITREC_CLOUDFLARE_ACCOUNT_ID",
}


async def check_subscription(settings: Settings, timeout: float = CHECK_TIMEOUT) -> Check:
    """The queue's metadata, read without pulling (a pull would lease real messages and move
    them toward the queue's dead-letter queue): it exists, the token may read it, and it has
    an HTTP pull consumer. Reading cannot prove the token may also acknowledge (a write)."""
    name = "event subscription"
    queue_id = settings.cloudflare_queue_id
    if queue_id is None:
        return Check(name, True, "off (AUDITREC_CLOUDFLARE_QUEUE_ID unset): deaths are polled")
    secret = settings.cloudflare_queues_token or settings.cloudflare_api_token
    client = QueueClient(
        api_url=settings.cloudflare_api_url,
        account_id=settings.account_id,
        queue_id=queue_id,
        api_token=secret.get_secret_value() if secret is not None else None,
        timeout=min(timeout, settings.probe_timeout.total_seconds()),
    )
    async with client:
        answer = await client.describe()
    what = f"queue {queue_id!r} of account {settings.account_id!r}"
    if isinstance(answer, QueueFailure):
        return Check(
            name,
            False,
            f"{what}: {answer.reason}: {answer.detail}",
            _QUEUE_CAUSE.get(answer.reason, "check AUDITREC_CLOUDFLARE_API_URL and the network"),
        )
    consumers = answer.get("consumers") or []
    kinds = {c.get("type") for c in consumers if isinstance(c, dict)}
    label = answer.get("queue_name") or queue_id
    if "http_pull" not in kinds:
        return Check(
            name,
            False,
            f"{what} ({label}) has no HTTP pull consumer (consumers: "
            f"{', '.join(sorted(str(k) for k in kinds)) or 'none'})",
            f"enable one: `wrangler queues consumer http add {label}` (a queue has either a "
            "Worker consumer or an HTTP pull consumer)",
        )
    return Check(name, True, f"{what} ({label}) answers and has an HTTP pull consumer")


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


async def check_outcomes(settings: Settings, timeout: float = CHECK_TIMEOUT) -> Check:
    """What ``serve`` would refuse about the outcome feed, then each endpoint: a webhook's host
    answers (any HTTP answer: nothing is delivered, so a receiver that answers a bare request
    with 405 passes), a queue's metadata is readable."""
    name = "outcome feed"
    refusal = settings.outcomes_refusal()
    if refusal is not None:
        return Check(name, False, refusal, "fix the variable named", refused=True)
    endpoints = settings.outcome_endpoints()
    if not endpoints:
        return Check(name, True, "off (AUDITREC_WEBHOOK_URLS and AUDITREC_OUTCOME_QUEUE_ID unset)")
    said: list[str] = []
    for endpoint in endpoints:
        if endpoint.kind == "queue":
            secret = settings.cloudflare_queues_token or settings.cloudflare_api_token
            client = QueueClient(
                api_url=settings.cloudflare_api_url,
                account_id=settings.account_id,
                queue_id=endpoint.address,
                api_token=secret.get_secret_value() if secret is not None else None,
                timeout=timeout,
            )
            async with client:
                answer = await client.describe()
            if isinstance(answer, QueueFailure):
                return Check(
                    name,
                    False,
                    f"{endpoint.name} ({endpoint.target}): {answer.reason}: {answer.detail}",
                    _QUEUE_CAUSE.get(answer.reason, "check AUDITREC_OUTCOME_QUEUE_ID"),
                )
            said.append(f"{endpoint.name} answers")
            continue
        try:
            async with httpx.AsyncClient(timeout=timeout, follow_redirects=False) as http:
                response = await http.head(endpoint.address)
        except httpx.HTTPError as exc:
            return Check(
                name,
                False,
                f"{endpoint.name} ({endpoint.target}) unreachable: {type(exc).__name__}",
                "check AUDITREC_WEBHOOK_URLS and the network",
            )
        said.append(f"{endpoint.name} answers (HTTP {response.status_code})")
    return Check(name, True, "; ".join(said))
