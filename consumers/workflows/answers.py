"""What one Workflows API request came to: the answer read from an HTTP response (the table in
:mod:`consumers.workflows.client`'s docstring) — the error list of a body, an instance's
``result`` (status, error payload, end time, the step it is at), a listing page, a
termination — whether it may be retried, its latency in the metrics, and what the probe makes
of a failure."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple

import httpx

from consumers.runtime.metrics import PROBE_PAUSES, PROBE_REQUEST_DURATION
from consumers.workflows.ratelimit import rate_limit_pause, seconds_from_retry_after
from statemachine.events import ProbeFailureReason
from statemachine.vocabulary import WORKFLOW_STATUSES

__all__ = [
    "BLINDING",
    "INSTANCE_STATUSES",
    "PROBABLE_CAUSE",
    "InstancePage",
    "InstanceStatus",
    "Listed",
    "Outcome",
    "ProbeFailure",
    "Reader",
    "StepState",
    "Termination",
    "TerminationOutcome",
    "describe_errors",
    "errors_of",
    "has_error",
    "interpret",
    "observe",
    "parse_page",
    "parse_result",
    "parse_steps",
    "read_instance",
    "read_instance_steps",
    "read_termination",
    "read_workflow",
]

INSTANCE_STATUSES = frozenset(WORKFLOW_STATUSES)

_R = ProbeFailureReason
# What a failed probe most likely means, and the setting to look at.
PROBABLE_CAUSE: dict[ProbeFailureReason, str] = {
    _R.UNAUTHORIZED: "the API refuses the token: check AUDITREC_CLOUDFLARE_API_TOKEN and "
    "AUDITREC_CLOUDFLARE_ACCOUNT_ID",
    _R.WORKFLOW_NOT_FOUND: "no such workflow: check AUDITREC_CLOUDFLARE_WORKFLOW",
    _R.NETWORK: "the API cannot be reached: check AUDITREC_CLOUDFLARE_API_URL and the network",
    _R.INVALID_RESPONSE: "the answers are not the Workflows API's: check "
    "AUDITREC_CLOUDFLARE_API_URL",
    _R.TIMEOUT: "the API answers slowly: AUDITREC_PROBE_TIMEOUT",
    _R.RATE_LIMITED: "the request budget or a 429 holds probes back: AUDITREC_PROBE_BUDGET",
    _R.SERVER_ERROR: "the API fails on its side (5xx); probes are retried",
}
# Failures that mean no probe can succeed until a setting is fixed (not the API's passing
# trouble): they make /readyz answer 503.
BLINDING: frozenset[ProbeFailureReason] = frozenset(
    {_R.UNAUTHORIZED, _R.WORKFLOW_NOT_FOUND, _R.NETWORK, _R.INVALID_RESPONSE}
)
_MAX_ERROR_TEXT = 2000


ErrorPayload = dict[str, str | None] | str | None


@dataclass(frozen=True, slots=True)
class StepState:
    """The step an instance is at, read from ``result.steps`` (asked for with ``steps=True``):
    the step running now (no ``end``, or ``success`` still null), else the last one."""

    name: str
    started_at: datetime | None
    """The step's ``start`` (its first attempt's), aware UTC; ``None`` when absent."""
    attempts: int
    """How many attempts the step has made so far (the running one included)."""
    retrying: bool
    """The step has not ended and at least one of its attempts failed."""
    error: ErrorPayload
    """The latest failed attempt's error (``{"name", "message"}`` or a string) while the step
    has not ended or when its last attempt failed; else ``None``."""

    def as_dict(self) -> dict[str, Any]:
        """As JSON (an event's evidence): ``started_at`` in ISO 8601."""
        started = self.started_at.isoformat() if self.started_at is not None else None
        return {"name": self.name, "started_at": started, "attempts": self.attempts,
                "retrying": self.retrying, "error": self.error}  # fmt: skip


@dataclass(frozen=True, slots=True)
class InstanceStatus:
    """The API answered about the instance."""

    status: str
    """An API status (:data:`INSTANCE_STATUSES`) or ``"not_found"``."""
    error: ErrorPayload
    """``{"name", "message"}`` or a string, as the API gave it."""
    ended_at: datetime | None
    """``result.end`` as an aware UTC datetime, ``None`` when absent or null."""
    step: StepState | None = None
    """The step it is at, when asked for with ``steps=True`` and the API listed one."""


TerminationOutcome = Literal["terminated", "already_ended", "not_found"]


@dataclass(frozen=True, slots=True)
class Termination:
    """The API answered a request to terminate an instance."""

    outcome: TerminationOutcome
    """``terminated`` (200), ``already_ended`` (409: it had completed, errored or was
    terminated), ``not_found`` (10400)."""
    status: str | None = None
    """The instance status the API reported with it, if any."""


@dataclass(frozen=True, slots=True)
class ProbeFailure:
    """The API did not answer about the instance; never a reason to fail an audit."""

    reason: ProbeFailureReason
    http_status: int | None
    detail: str
    """Human readable, at most 500 characters, never containing the API token."""


class Listed(NamedTuple):
    """One instance of a listing page."""

    id: str
    status: str
    """Its listed status (``"unknown"`` when the item has none)."""
    created_on: datetime | None = None
    """``created_on``, aware UTC; ``None`` when absent or unreadable."""


@dataclass(frozen=True, slots=True)
class InstancePage:
    """One page of a workflow's instance listing: ``(id, status, created_on)`` of each item,
    and the cursor of the next page (``None`` on the last). A listing carries no error
    payload."""

    items: list[Listed]
    cursor: str | None


def errors_of(body: Any) -> list[tuple[int | None, str]]:
    if not isinstance(body, dict) or not isinstance(body.get("errors"), list):
        return []
    found: list[tuple[int | None, str]] = []
    for item in body["errors"]:
        if not isinstance(item, dict):
            continue
        raw = item.get("code")
        text = str(raw) if isinstance(raw, int | str) else ""
        code = int(text) if text.isascii() and text.isdigit() else None
        found.append((code, str(item.get("message", ""))[:200]))
    return found


def has_error(errors: list[tuple[int | None, str]], code: int, fragment: str | None) -> bool:
    return any(c == code or (fragment is not None and fragment in m) for c, m in errors)


def describe_errors(errors: list[tuple[int | None, str]]) -> str:
    return "; ".join(f"{c} {m}" if c is not None else m for c, m in errors[:3])


def parse_result(result: Any, *, steps: bool = False) -> InstanceStatus | str:
    """The instance status, or what is wrong with ``result`` (a string). With ``steps``, the
    step it is at (:func:`parse_steps`) too."""
    if not isinstance(result, dict):
        return "result is missing or not an object"
    status = result.get("status")
    if not isinstance(status, str) or status not in INSTANCE_STATUSES:
        return f"unknown instance status {json.dumps(status)[:60]}"
    error = _error_payload(result.get("error"))
    if error is _BAD:
        return "result.error has a non-string name or message, or is neither object nor string"
    end = result.get("end")
    step = parse_steps(result.get("steps")) if steps else None
    if end is None:
        return InstanceStatus(status, error, None, step)
    if not isinstance(end, str):
        return "result.end is not a string"
    ended = _timestamp(end)
    if ended is None:
        return f"result.end is not an ISO timestamp: {end[:40]!r}"
    return InstanceStatus(status, error, ended, step)


_BAD: Any = object()


def _error_payload(error: Any) -> Any:
    """An error as the API gives it: ``{"name", "message"}`` (other keys left out), a string,
    or null; :data:`_BAD` when it is none of these."""
    if isinstance(error, dict):
        parts = {k: error.get(k) for k in ("name", "message")}
        if not all(v is None or isinstance(v, str) for v in parts.values()):
            return _BAD
        return {k: v[:_MAX_ERROR_TEXT] if v else v for k, v in parts.items()}
    if isinstance(error, str):
        return error[:_MAX_ERROR_TEXT]
    return _BAD if error is not None else None


def _timestamp(value: Any) -> datetime | None:
    """An ISO 8601 time as an aware UTC datetime (naive ones are UTC); ``None`` when it is
    not one."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def parse_steps(steps: Any) -> StepState | None:
    """The step an instance is at, from ``result.steps``: the last ``type: "step"`` entry that
    has not ended (no ``end``, or ``success`` null), else the last step entry; sleeps, waits
    for events and terminations are other types and skipped. ``None`` when there is no step
    or the list does not read: steps are evidence, never a reason to fail a read."""
    try:
        if not isinstance(steps, list):
            return None
        entries = [e for e in steps if isinstance(e, dict) and e.get("type") == "step"]
        if not entries:
            return None
        open_ = [e for e in entries if e.get("end") is None or e.get("success") is None]
        step = open_[-1] if open_ else entries[-1]
        name = step.get("name")
        attempts = step.get("attempts")
        if not isinstance(name, str) or not isinstance(attempts, list):
            return None
        if not all(isinstance(a, dict) for a in attempts):
            return None
        ended = step.get("end") is not None
        errors = [a.get("error") for a in attempts if a.get("error") is not None]
        last_failed = bool(attempts) and attempts[-1].get("error") is not None
        error = None
        if errors and (not ended or last_failed):
            error = _error_payload(errors[-1])
            if error is _BAD:
                error = str(errors[-1])[:_MAX_ERROR_TEXT]
        return StepState(
            name=name[:_MAX_ERROR_TEXT],
            started_at=_timestamp(step.get("start"))
            or (_timestamp(attempts[0].get("start")) if attempts else None),
            attempts=len(attempts),
            retrying=not ended and bool(errors),
            error=error,
        )
    except Exception:  # a shape nobody foresaw: no step rather than no answer
        return None


def parse_page(body: dict[str, Any]) -> InstancePage | str:
    """A listing page, or what is wrong with the body (a string)."""
    result = body.get("result")
    if not isinstance(result, list):
        return "result is missing or not a list"
    items = []
    for item in result:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            return "a listed instance has no string id"
        status = item.get("status")  # one not known here only means "ask for it alone"
        status = status if isinstance(status, str) else "unknown"
        items.append(Listed(item["id"], status, _timestamp(item.get("created_on"))))
    info = body.get("result_info")
    cursor = info.get("cursor") if isinstance(info, dict) else None
    if cursor is not None and not isinstance(cursor, str):
        return "result_info.cursor is not a string"
    # An empty page ends the listing whatever the cursor says (a cursor that never ends would
    # spend the budget).
    return InstancePage(items, cursor or None if items else None)


# -- one request's outcome ----------------------------------------------------------------------

Answer = InstanceStatus | InstancePage | Termination | ProbeFailure
# How a successful body reads: an answer, or what is wrong with it.
Reader = Callable[[dict[str, Any]], InstanceStatus | InstancePage | Termination | str]
Fail = Callable[[ProbeFailureReason, int | None, str], ProbeFailure]


@dataclass(frozen=True, slots=True)
class Outcome:
    answer: Answer
    retriable: bool = False
    retry_after: float | None = None
    sent: bool = True  # False: refused before sending (the budget, a pause)


def read_instance(body: dict[str, Any]) -> InstanceStatus | str:
    return parse_result(body.get("result"))


def read_instance_steps(body: dict[str, Any]) -> InstanceStatus | str:
    return parse_result(body.get("result"), steps=True)


def read_termination(body: dict[str, Any]) -> Termination | str:
    """A 200 to ``PATCH …/status`` ``terminate``: the instance is terminated."""
    return Termination("terminated", _status_of(body))


def _status_of(body: Any) -> str | None:
    result = body.get("result") if isinstance(body, dict) else None
    status = result.get("status") if isinstance(result, dict) else None
    return status[:64] if isinstance(status, str) else None


def read_workflow(body: dict[str, Any]) -> InstanceStatus | str:
    return InstanceStatus("unknown", None, None)  # the workflow answered: nothing more to read


async def interpret(
    response: httpx.Response,
    read: Reader,
    fail: Fail,
    pause: Callable[[float], Awaitable[float]],
    *,
    terminating: bool = False,
) -> Outcome:
    """The outcome of ``response``; a 429 ``pause``s every call (returns the seconds).
    ``terminating``: the response answers a termination (409 and not found read as such)."""
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
        return Outcome(fail(_R.RATE_LIMITED, code, f"{said}; paused {seconds:.0f}s"))
    if code < 500 and has_error(errors, 10400, "instance.not_found"):
        if terminating:
            return Outcome(Termination("not_found"))
        return Outcome(InstanceStatus("not_found", None, None))
    if terminating and (code == 409 or (code < 500 and _already_finished(errors))):
        return Outcome(Termination("already_ended", _status_of(body)))
    if code < 500 and has_error(errors, 10200, "workflow.not_found"):
        return Outcome(fail(_R.WORKFLOW_NOT_FOUND, code, said))
    if code in (401, 403) or has_error(errors, 10000, None):
        return Outcome(fail(_R.UNAUTHORIZED, code, said))
    retry_after = seconds_from_retry_after(response.headers.get("retry-after"))
    if code >= 500 or code in (408, 409):
        reason = _R.TIMEOUT if code == 408 else _R.SERVER_ERROR
        return Outcome(fail(reason, code, said), retriable=True, retry_after=retry_after)
    if code != 200:
        return Outcome(fail(_R.INVALID_RESPONSE, code, f"unexpected {said}"))
    if not isinstance(body, dict):
        what = "not JSON" if body is None else "not a JSON object"
        return Outcome(fail(_R.INVALID_RESPONSE, code, f"HTTP 200 body is {what}"))
    success = body.get("success")
    if success is False:
        answer = fail(_R.SERVER_ERROR, code, f"{said} with success: false")
        return Outcome(answer, retriable=True, retry_after=retry_after)
    if success is not True:
        return Outcome(fail(_R.INVALID_RESPONSE, code, "body has no boolean success"))
    parsed = read(body)
    if isinstance(parsed, str):
        return Outcome(fail(_R.INVALID_RESPONSE, code, parsed))
    return Outcome(parsed)


def _already_finished(errors: list[tuple[int | None, str]]) -> bool:
    return any("already_finished" in m or "already finished" in m for _, m in errors)


def observe(answer: Answer, seconds: float) -> None:
    """One request's latency, by what it answered."""
    if isinstance(answer, ProbeFailure):
        outcome, status = answer.reason.value, str(answer.http_status or "none")
    elif isinstance(answer, Termination):
        outcome = answer.outcome
        status = {"terminated": "200", "already_ended": "409", "not_found": "404"}[outcome]
    else:
        outcome = "listed" if isinstance(answer, InstancePage) else answer.status
        status = "404" if outcome == "not_found" else "200"
    PROBE_REQUEST_DURATION.labels(outcome, status).observe(seconds)
