"""What one Workflows API request came to: the answer read from an HTTP response (the table in
:mod:`consumers.workflows.client`'s docstring), whether it may be retried, and its latency in
the metrics."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from consumers.runtime.metrics import PROBE_PAUSES, PROBE_REQUEST_DURATION
from consumers.workflows.answers import (
    InstancePage,
    InstanceStatus,
    ProbeFailure,
    describe_errors,
    errors_of,
    has_error,
    parse_result,
)
from consumers.workflows.ratelimit import rate_limit_pause, seconds_from_retry_after
from statemachine.events import ProbeFailureReason

__all__ = ["Outcome", "Reader", "interpret", "observe", "read_instance", "read_workflow"]

_Reason = ProbeFailureReason
Answer = InstanceStatus | InstancePage | ProbeFailure
# How a successful body reads: an answer, or what is wrong with it.
Reader = Callable[[dict[str, Any]], InstanceStatus | InstancePage | str]
Fail = Callable[[ProbeFailureReason, int | None, str], ProbeFailure]


@dataclass(frozen=True, slots=True)
class Outcome:
    answer: Answer
    retriable: bool = False
    retry_after: float | None = None
    sent: bool = True  # False: refused before sending (the budget, a pause)


def read_instance(body: dict[str, Any]) -> InstanceStatus | str:
    return parse_result(body.get("result"))


def read_workflow(body: dict[str, Any]) -> InstanceStatus | str:
    return InstanceStatus("unknown", None, None)  # the workflow answered: nothing more to read


async def interpret(
    response: httpx.Response,
    read: Reader,
    fail: Fail,
    pause: Callable[[float], Awaitable[float]],
) -> Outcome:
    """The outcome of ``response``; a 429 ``pause``s every call (returns the seconds)."""
    code = response.status_code
    try:
        body: Any = response.json()
    except (ValueError, UnicodeDecodeError):
        body = None
    errors = errors_of(body)
    said = f"HTTP {code}" + (f": {describe_errors(errors)}" if errors else "")
    if code == 429:
        PROBE_PAUSES.inc()
        seconds = await pause(rate_limit_pause(response.headers))
        return Outcome(fail(_Reason.RATE_LIMITED, code, f"{said}; paused {seconds:.0f}s"))
    if code < 500 and has_error(errors, 10400, "instance.not_found"):
        return Outcome(InstanceStatus("not_found", None, None))
    if code < 500 and has_error(errors, 10200, "workflow.not_found"):
        return Outcome(fail(_Reason.WORKFLOW_NOT_FOUND, code, said))
    if code in (401, 403) or has_error(errors, 10000, None):
        return Outcome(fail(_Reason.UNAUTHORIZED, code, said))
    retry_after = seconds_from_retry_after(response.headers.get("retry-after"))
    if code >= 500 or code in (408, 409):
        reason = _Reason.TIMEOUT if code == 408 else _Reason.SERVER_ERROR
        return Outcome(fail(reason, code, said), retriable=True, retry_after=retry_after)
    if code != 200:
        return Outcome(fail(_Reason.INVALID_RESPONSE, code, f"unexpected {said}"))
    if not isinstance(body, dict):
        what = "not JSON" if body is None else "not a JSON object"
        return Outcome(fail(_Reason.INVALID_RESPONSE, code, f"HTTP 200 body is {what}"))
    success = body.get("success")
    if success is False:
        answer = fail(_Reason.SERVER_ERROR, code, f"{said} with success: false")
        return Outcome(answer, retriable=True, retry_after=retry_after)
    if success is not True:
        return Outcome(fail(_Reason.INVALID_RESPONSE, code, "body has no boolean success"))
    parsed = read(body)
    if isinstance(parsed, str):
        return Outcome(fail(_Reason.INVALID_RESPONSE, code, parsed))
    return Outcome(parsed)


def observe(answer: Answer, seconds: float) -> None:
    """One request's latency, by what it answered."""
    if isinstance(answer, ProbeFailure):
        outcome, status = answer.reason.value, str(answer.http_status or "none")
    else:
        outcome = "listed" if isinstance(answer, InstancePage) else answer.status
        status = "404" if outcome == "not_found" else "200"
    PROBE_REQUEST_DURATION.labels(outcome, status).observe(seconds)
