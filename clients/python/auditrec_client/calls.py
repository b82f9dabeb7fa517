"""The requests the clients make and how their answers are read, without I/O: the synchronous
and the asyncio client share these and differ only in how they send and wait."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from auditrec_client.errors import ApiError, error_for
from auditrec_client.events import AUDIT_ID, Event, envelope_of
from auditrec_client.vocabulary import AUDIT_ID_RULE

__all__ = [
    "RETRIED_ERRORS",
    "AuditPage",
    "Call",
    "audits",
    "headers",
    "page",
    "publish",
    "published_ids",
    "read",
    "replay",
    "status",
]

_DURATION = re.compile(r"^\d+(\.\d+)?[smhd]?$")
_WORKFLOW = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # a Cloudflare workflow's name
# What a request got no answer for, and may be sent again; a malformed URL or an unsupported
# scheme is not among them (it would fail the same way every time).
RETRIED_ERRORS = (httpx.NetworkError, httpx.TimeoutException, httpx.RemoteProtocolError)


@dataclass(frozen=True, slots=True)
class Call:
    method: str
    path: str
    params: Mapping[str, str] | None = None
    json: Any = None


@dataclass(frozen=True, slots=True)
class AuditPage:
    """One page of ``GET /audits``; pass ``next_cursor`` (``prev_cursor``) for the next
    (previous) page; ``total``: every audit the filters select."""

    audits: list[dict[str, Any]]
    next_cursor: str | None
    prev_cursor: str | None = None
    total: int | None = None


def _audit_path(audit_id: str) -> str:
    if not isinstance(audit_id, str) or not AUDIT_ID.match(audit_id):
        raise ValueError(f"audit_id: {audit_id!r} {AUDIT_ID_RULE}")
    return f"/audits/{audit_id}"


def publish(events: Iterable[Event | Mapping[str, Any]], producer: str | None) -> Call:
    """``POST /events`` with every envelope, their ids fixed before the first attempt."""
    body = [envelope_of(e, producer) for e in events]
    if not body:
        raise ValueError("publish: no events given")
    return Call("POST", "/events", json=body)


def status(audit_id: str, probe: bool) -> Call:
    return Call("GET", _audit_path(audit_id), params=None if probe else {"probe": "false"})


def audits(
    *,
    status: str | None,
    project_id: str | None,
    error_code: str | None,
    older_than: str | None,
    limit: int,
    cursor: str | None,
    running_longer_than: str | None = None,
    held: bool | None = None,
    q: str | None = None,
    sort: str = "started",
    order: str = "desc",
    workflow: str | None = None,
    stalled: bool | None = None,
) -> Call:
    for name, value in (("older_than", older_than), ("running_longer_than", running_longer_than)):
        if value is not None and not _DURATION.match(value):
            raise ValueError(f"{name}: {value!r} is not a duration such as '2h' or '90m'")
    if workflow is not None and not _WORKFLOW.match(workflow):
        raise ValueError(f"workflow: {workflow!r} is not a workflow's name (1-64 of A-Za-z0-9_-)")
    given = {
        "status": status,
        "project_id": project_id,
        "error_code": error_code,
        "older_than": older_than,
        "running_longer_than": running_longer_than,
        "held": None if held is None else ("true" if held else "false"),
        "workflow": workflow,
        "stalled": None if stalled is None else ("true" if stalled else "false"),
        "q": q,
        "sort": None if sort == "started" else sort,
        "order": None if order == "desc" else order,
        "cursor": cursor,
        "limit": str(limit),
    }
    return Call("GET", "/audits", params={k: v for k, v in given.items() if v is not None})


def replay(audit_id: str) -> Call:
    return Call("GET", f"{_audit_path(audit_id)}/events")


def read(response: httpx.Response) -> Any:
    """The JSON of a successful answer; the :class:`ApiError` for any other."""
    try:
        body = response.json()
    except ValueError:
        body = {"detail": response.text[:500] or response.reason_phrase}
    if response.is_success:
        return body
    raise error_for(response.status_code, body)


def published_ids(body: Any, sent: Any) -> list[str]:
    ids = body.get("event_ids") if isinstance(body, dict) else None
    if not isinstance(ids, list):
        raise ApiError(202, f"unexpected answer to POST /events: {body!r}"[:500])
    expected = [e["event_id"] for e in sent]
    if [str(i) for i in ids] != expected:
        raise ApiError(202, f"POST /events accepted {ids}, not the ids sent {expected}")
    return expected


def page(body: Any) -> AuditPage:
    return AuditPage(
        audits=list(body["audits"]),
        next_cursor=body.get("next_cursor"),
        prev_cursor=body.get("prev_cursor"),
        total=body.get("total"),
    )


def headers(token: str | None, user_agent: str) -> dict[str, str]:
    out = {"user-agent": user_agent, "accept": "application/json"}
    if token:
        out["authorization"] = f"Bearer {token}"
    return out
