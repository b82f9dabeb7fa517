"""The Cloudflare Workflows REST client the probe uses to ask about instances and to terminate them.

Every call names its workflow (``workflow=``, default the constructor's). No call raises for
API or network trouble. :meth:`WorkflowsClient.get_instance` answers an :class:`InstanceStatus`
(the API spoke about the instance, ``"not_found"`` included; with ``steps=True`` the step it is
at too) or a :class:`ProbeFailure` (it did not; such a failure must never fail an audit);
:meth:`WorkflowsClient.terminate` (``PATCH …/instances/{id}/status`` ``{"status":
"terminate"}``) a :class:`Termination` or a :class:`ProbeFailure`::

    HTTP / body                                      answer
    200, success: true, result.status known          InstanceStatus(status, error, ended_at)
    200 to a terminate                               Termination("terminated")
    409 to a terminate (or "already_finished")       Termination("already_ended")  not retried
    errors[].code 10400 / "instance.not_found"       InstanceStatus("not_found"),
                                                     Termination("not_found") to a terminate
    errors[].code 10200 / "workflow.not_found"       ProbeFailure(workflow_not_found)
    401, 403, errors[].code 10000                    ProbeFailure(unauthorized)
    429                                              ProbeFailure(rate_limited), pauses ALL calls
    5xx, 409 to a GET, 200 with success: false       ProbeFailure(server_error)      retried
    408, client timeout                              ProbeFailure(timeout)           retried
    connection / protocol error                      ProbeFailure(network)           retried
    anything else (bad JSON, missing fields, ...)    ProbeFailure(invalid_response)

A terminate is idempotent, so it is retried as a GET is.

Policies:

- **Retries**: at most ``max_retries`` (default 2) more attempts for the retried rows above,
  after ``min(0.5 * 2**n, 8)`` s less up to 25 % jitter; a ``retry-after`` on such an answer
  replaces the backoff when it is <= 2 s and stops retrying when longer. Every attempt is a
  request and counts against the budget.
- **429** (``ratelimit.py``): probing pauses for ``retry-after`` (seconds or HTTP date),
  else the ``Ratelimit`` header's ``t=``, else ``X-RateLimit-Reset``, else 60 s (clamped to
  1 s .. 15 min). A call made during the pause waits for it to end when its ``wait`` allows
  (the caller's bound: a sweep's, a status read's), then is sent; otherwise it answers
  ``rate_limited`` at once, without sending anything.
- **Budget**: ``budget`` requests per sliding ``budget_window`` seconds, shared by every caller
  of this client, or by every process probing the account when the limiter is the store's
  (:class:`~consumers.workflows.ratelimit.SharedRateLimit`, which also holds a ``spender`` to
  its share of the window). A call waits for a slot to free within its ``wait``; if none frees
  in time it answers ``rate_limited`` without waiting.
- **Concurrency**: at most ``concurrency`` requests in flight (a semaphore, and the same
  connection limits on the transport). Calls queue for the semaphore without a deadline.
- **Time**: pauses, the budget window and backoff are measured with ``clock`` (default
  ``time.monotonic``) and waited with ``sleep`` (default ``asyncio.sleep``); tests pass a fake
  pair to run them without waiting. HTTP timeouts are the transport's and use real time.

The API token is sent as ``Authorization: Bearer`` and is scrubbed from every detail and log.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import ssl
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from urllib.parse import quote, urlencode

import httpx

from consumers.runtime.metrics import PROBE_BUDGET_SLOTS
from consumers.workflows.answers import (
    INSTANCE_STATUSES,
    InstancePage,
    InstanceStatus,
    Listed,
    Outcome,
    ProbeFailure,
    Reader,
    StepState,
    Termination,
    interpret,
    observe,
    parse_page,
    read_instance,
    read_instance_steps,
    read_termination,
    read_workflow,
)
from consumers.workflows.ratelimit import OTHER, Limiter, RateLimit
from statemachine.errors import ConfigError, InvalidInput, WorkflowsApiError
from statemachine.events import ProbeFailureReason
from statemachine.longlived import LongLived

__all__ = [
    "INSTANCE_STATUSES",
    "InstancePage",
    "InstanceStatus",
    "Listed",
    "ProbeFailure",
    "StepState",
    "Termination",
    "WorkflowsClient",
    "api_client",
]


_Reason = ProbeFailureReason
_RETRY_AFTER_HONOURED = 2.0
_MAX_DETAIL = 500

logger = logging.getLogger(__name__)


class WorkflowsClient(LongLived):
    """Asks the Workflows API about instances of a workflow (``workflow`` by default, any other
    one per call) and terminates them. Start it (or ``async with``)."""

    def __init__(
        self,
        *,
        api_url: str,
        account_id: str,
        workflow: str,
        api_token: str | None,
        concurrency: int = 8,
        budget: int = 1000,
        budget_window: float = 300.0,
        timeout: float = 10.0,
        max_retries: int = 2,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        limiter: Limiter | None = None,
    ) -> None:
        """``transport`` (e.g. for tests) is used as given and owned by the client: its
        connection limits are the caller's business; the default transport gets
        ``concurrency`` connections. ``clock`` (monotonic seconds) and ``sleep`` time the
        429 pauses, the budget window and the retry backoff."""
        if concurrency < 1 or budget < 1 or budget_window <= 0 or timeout <= 0 or max_retries < 0:
            raise ConfigError(
                "Workflows client: concurrency and budget must be >= 1, window and timeout > 0"
            )
        self._workflows = f"{api_url.rstrip('/')}/accounts/{_segment(account_id)}/workflows/"
        self.workflow = workflow
        self._token = api_token or None
        self._concurrency = concurrency
        self._timeout = timeout
        self._max_retries = max_retries
        self._transport = transport
        self._clock = clock
        self._sleep = sleep
        self._client: httpx.AsyncClient | None = None
        self._semaphore = asyncio.Semaphore(concurrency)
        self._limit: Limiter = limiter or RateLimit(budget, budget_window, clock=clock, sleep=sleep)

    def __repr__(self) -> str:  # no token here
        return f"WorkflowsClient({self._base()!r}, concurrency={self._concurrency})"

    def _base(self, workflow: str | None = None) -> str:
        """The URL of ``workflow``'s instances (default: the client's), ending in ``/``."""
        if workflow is None:
            workflow = self.workflow
        elif not workflow:
            raise InvalidInput("a workflow named per call must not be empty")
        return f"{self._workflows}{_segment(workflow)}/instances/"

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        if self._client is not None:
            return
        limits = httpx.Limits(
            max_connections=self._concurrency,
            max_keepalive_connections=self._concurrency,
            keepalive_expiry=30.0,
        )
        self._client = api_client(self._token, self._timeout, self._transport, limits)

    async def stop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    # --- state ---------------------------------------------------------------------------------

    async def budget_left(self) -> int:
        """Requests that may be sent now without waiting for the window."""
        return await self._limit.budget_left()

    async def paused_for(self) -> float | None:
        """Seconds left of a 429 pause; ``None`` when not paused."""
        return await self._limit.paused_for()

    async def room(self, spender: str) -> int | None:
        """Requests ``spender`` could send now without waiting for the budget (0 during a
        429 pause); ``None`` when the limiter cannot tell."""
        room = getattr(self._limit, "room", None)
        return None if room is None else int(await room(spender))

    # --- the call ------------------------------------------------------------------------------

    async def get_instance(
        self,
        instance_id: str,
        *,
        workflow: str | None = None,
        steps: bool = False,
        wait: float | None = None,
        spender: str = OTHER,
    ) -> InstanceStatus | ProbeFailure:
        """The instance's status, or why the API could not tell (see the module docstring).
        ``workflow``: whose instance (default: the client's); ``steps``: ask for its steps too
        (no ``?simple=true``) and read the one it is at into ``step``; ``wait``: how long the
        caller can wait for a free request slot or for a 429 pause to end (default: the request
        timeout); ``spender``: whose budget slot it takes."""
        if not instance_id:
            raise InvalidInput("workflow instance id must not be empty")
        url = self._base(workflow) + _segment(instance_id)
        if steps:
            answer = await self._call(url, wait, read_instance_steps, spender=spender)
        else:
            answer = await self._call(url + "?simple=true", wait, spender=spender)
        assert isinstance(answer, InstanceStatus | ProbeFailure)
        return answer

    async def terminate(
        self,
        instance_id: str,
        *,
        workflow: str | None = None,
        wait: float | None = None,
        spender: str = OTHER,
    ) -> Termination | ProbeFailure:
        """Ask the API to terminate the instance (``PATCH …/status`` ``{"status":
        "terminate"}``): ``terminated``, ``already_ended`` (409: it had ended), ``not_found``;
        or why the API could not tell. Retries, the budget and 429 pauses are those of
        :meth:`get_instance` (a terminate is idempotent); a 409 is not retried."""
        if not instance_id:
            raise InvalidInput("workflow instance id must not be empty")
        url = self._base(workflow) + _segment(instance_id) + "/status"
        answer = await self._call(
            url, wait, read_termination, spender=spender, body={"status": "terminate"}
        )
        assert isinstance(answer, Termination | ProbeFailure)
        return answer

    async def list_instances(
        self,
        *,
        status: str | None = None,
        date_start: datetime | None = None,
        per_page: int = 100,
        cursor: str | None = None,
        workflow: str | None = None,
        wait: float | None = None,
        spender: str = OTHER,
    ) -> InstancePage | ProbeFailure:
        """One page of the workflow's instances (created since ``date_start``, in ``status``),
        oldest first, with the cursor of the next page; or why the API could not tell. Retries,
        the budget and 429 pauses are those of :meth:`get_instance`."""
        query: dict[str, str | int] = {"per_page": per_page, "direction": "asc"}
        if status is not None:
            query["status"] = status
        if date_start is not None:  # ISO 8601 in UTC without an offset, as the API asks
            query["date_start"] = date_start.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
        if cursor is not None:
            query["cursor"] = cursor
        url = self._base(workflow).rstrip("/") + "?" + urlencode(query)
        answer = await self._call(url, wait, parse_page, spender=spender)
        assert isinstance(answer, InstancePage | ProbeFailure)
        return answer

    async def _call(
        self,
        url: str,
        wait: float | None,
        read: Reader = read_instance,
        *,
        spender: str,
        body: dict[str, str] | None = None,
    ) -> InstanceStatus | InstancePage | Termination | ProbeFailure:
        """One answer with the retries of the module docstring; a GET, or with ``body`` a
        PATCH."""
        if self._client is None:
            raise WorkflowsApiError("the Workflows client is not started")
        deadline = self._clock() + (self._timeout if wait is None else max(wait, 0.0))
        attempt = 0
        while True:
            left = max(deadline - self._clock(), 0.0)
            outcome = await self._attempt(url, left, read, spender, body)
            if not outcome.retriable or attempt >= self._max_retries:
                return outcome.answer
            if outcome.retry_after is None:
                delay = min(0.5 * 2**attempt, 8.0) * (1 - 0.25 * random.random())
            elif outcome.retry_after <= _RETRY_AFTER_HONOURED:
                delay = outcome.retry_after
            else:
                return outcome.answer
            attempt += 1
            await self._sleep(delay)

    async def check(self, *, workflow: str | None = None) -> ProbeFailure | None:
        """One cheap authenticated call (get the workflow): ``None`` when the API, the token,
        the account and the workflow all answer; else why not."""
        if self._client is None:
            raise WorkflowsApiError("the Workflows client is not started")
        url = self._base(workflow).removesuffix("instances/").rstrip("/")
        outcome = await self._attempt(url, 0.0, read_workflow, OTHER)
        if isinstance(outcome.answer, ProbeFailure):
            return outcome.answer
        return None

    async def _attempt(
        self,
        url: str,
        wait: float,
        read: Reader,
        spender: str,
        body: dict[str, str] | None = None,
    ) -> Outcome:
        sent = time.monotonic()
        outcome = await self._send(url, wait, read, spender, body)
        if outcome.sent:
            observe(outcome.answer, time.monotonic() - sent)
        return outcome

    async def _send(
        self, url: str, wait: float, read: Reader, spender: str, body: dict[str, str] | None
    ) -> Outcome:
        async with self._semaphore:
            # Admitted as it is sent, so the budget counts requests when they reach the API
            # (a pause holds every request anyway, so waiting here blocks nobody who could go).
            refused = await self._limit.take(wait, spender)
            PROBE_BUDGET_SLOTS.labels(spender, "spent" if refused is None else "refused").inc()
            if refused is not None:
                return Outcome(self._failure(_Reason.RATE_LIMITED, None, refused), sent=False)
            client = self._client
            if client is None:
                raise WorkflowsApiError("the Workflows client was stopped")
            try:
                if body is None:
                    response = await client.get(url)
                else:
                    response = await client.patch(url, json=body)
            except httpx.TimeoutException as exc:
                detail = f"no answer within {self._timeout:g}s ({type(exc).__name__})"
                return Outcome(self._failure(_Reason.TIMEOUT, None, detail), retriable=True)
            except httpx.UnsupportedProtocol as exc:
                return Outcome(self._failure(_Reason.NETWORK, None, f"bad API URL: {exc}"))
            except httpx.TransportError as exc:
                detail = f"{type(exc).__name__}: {exc}"
                return Outcome(self._failure(_Reason.NETWORK, None, detail), retriable=True)
            except httpx.HTTPError as exc:  # e.g. a body that cannot be decoded
                detail = f"unreadable response: {type(exc).__name__}: {exc}"
                return Outcome(self._failure(_Reason.INVALID_RESPONSE, None, detail))
        try:
            return await interpret(
                response, read, self._failure, self._limit.pause, terminating=body is not None
            )
        except Exception as exc:  # a shape nobody foresaw: never stall the probe on it
            detail = f"unusable response: {type(exc).__name__}: {exc}"
            return Outcome(self._failure(_Reason.INVALID_RESPONSE, response.status_code, detail))

    def _failure(self, reason: ProbeFailureReason, status: int | None, detail: str) -> ProbeFailure:
        if self._token:
            detail = detail.replace(self._token, "[redacted]")
        if len(detail) > _MAX_DETAIL:
            detail = detail[: _MAX_DETAIL - 1] + "…"
        return ProbeFailure(reason, status, detail)


def api_client(
    token: str | None,
    timeout: float,
    transport: httpx.AsyncBaseTransport | None = None,
    limits: httpx.Limits | None = None,
) -> httpx.AsyncClient:
    """An HTTP client for Cloudflare's API: JSON, the bearer ``token``, no redirects, and the
    process's one TLS context (``transport``, e.g. a test's, is used as given)."""
    headers = {"Accept": "application/json", "User-Agent": "auditrec"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.AsyncClient(
        headers=headers,
        timeout=httpx.Timeout(timeout),
        transport=transport
        or httpx.AsyncHTTPTransport(verify=_ssl_context(), limits=limits or httpx.Limits()),
        follow_redirects=False,
    )


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """Built once per process: loading the CA bundle costs ~0.1 s per client otherwise."""
    return httpx.create_ssl_context()


def _segment(value: str) -> str:
    """One percent-encoded path segment; ``.``/``..`` encoded so nothing normalises them away."""
    encoded = quote(value, safe="")
    return encoded.replace(".", "%2E") if encoded in (".", "..") else encoded
