"""How the Workflows API's answers read: the error list of a body, and an instance's
``result`` (status, error payload, end time), with what the probe makes of them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from statemachine.events import ProbeFailureReason
from statemachine.vocabulary import WORKFLOW_STATUSES

__all__ = [
    "BLINDING",
    "INSTANCE_STATUSES",
    "PROBABLE_CAUSE",
    "InstancePage",
    "InstanceStatus",
    "ProbeFailure",
    "describe_errors",
    "errors_of",
    "has_error",
    "parse_page",
    "parse_result",
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


@dataclass(frozen=True, slots=True)
class InstanceStatus:
    """The API answered about the instance."""

    status: str
    """An API status (:data:`INSTANCE_STATUSES`) or ``"not_found"``."""
    error: dict[str, str | None] | str | None
    """``{"name", "message"}`` or a string, as the API gave it."""
    ended_at: datetime | None
    """``result.end`` as an aware UTC datetime, ``None`` when absent or null."""


@dataclass(frozen=True, slots=True)
class ProbeFailure:
    """The API did not answer about the instance; never a reason to fail an audit."""

    reason: ProbeFailureReason
    http_status: int | None
    detail: str
    """Human readable, at most 500 characters, never containing the API token."""


@dataclass(frozen=True, slots=True)
class InstancePage:
    """One page of a workflow's instance listing: ``(id, status)`` of each item, and the cursor
    of the next page (``None`` on the last). A listing carries no error payload."""

    items: list[tuple[str, str]]
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


def parse_result(result: Any) -> InstanceStatus | str:
    """The instance status, or what is wrong with ``result`` (a string)."""
    if not isinstance(result, dict):
        return "result is missing or not an object"
    status = result.get("status")
    if not isinstance(status, str) or status not in INSTANCE_STATUSES:
        return f"unknown instance status {json.dumps(status)[:60]}"
    error = result.get("error")
    if isinstance(error, dict):
        parts = {k: error.get(k) for k in ("name", "message")}
        if not all(v is None or isinstance(v, str) for v in parts.values()):
            return "result.error has a non-string name or message"
        error = {k: v[:_MAX_ERROR_TEXT] if v else v for k, v in parts.items()}
    elif isinstance(error, str):
        error = error[:_MAX_ERROR_TEXT]
    elif error is not None:
        return "result.error is neither an object nor a string"
    end = result.get("end")
    if end is None:
        return InstanceStatus(status, error, None)
    if not isinstance(end, str):
        return "result.end is not a string"
    try:
        ended = datetime.fromisoformat(end)
    except ValueError:
        return f"result.end is not an ISO timestamp: {end[:40]!r}"
    if ended.tzinfo is None:
        ended = ended.replace(tzinfo=UTC)
    return InstanceStatus(status, error, ended.astimezone(UTC))


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
        items.append((item["id"], status if isinstance(status, str) else "unknown"))
    info = body.get("result_info")
    cursor = info.get("cursor") if isinstance(info, dict) else None
    if cursor is not None and not isinstance(cursor, str):
        return "result_info.cursor is not a string"
    # An empty page ends the listing whatever the cursor says (a cursor that never ends would
    # spend the budget).
    return InstancePage(items, cursor or None if items else None)
