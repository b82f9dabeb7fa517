"""The Cloudflare Queues HTTP pull consumer the subscriber reads the Workflows event
subscription through: pull a batch, acknowledge (or retry) it, and look at the queue without
pulling; and the producer API: send a batch of messages to a queue.

Neither call raises for API or network trouble: each answers its result or a
:class:`QueueFailure` saying why not (with the seconds a 429 or a 5xx asked to wait). Pulls
and acknowledgements are not Workflows API calls: they spend nothing of the probe budget, and
Cloudflare limits them per queue (5,000 messages a second). The token needs Queues read and
write (acknowledging is a write); it is sent as ``Authorization: Bearer`` and scrubbed from
every detail.

Shapes (``POST …/queues/{id}/messages/pull``, ``…/messages/ack`` and ``…/messages/batch``,
``GET …/queues/{id}``)
are those of Cloudflare's API as the official SDKs parse them; an older pull answer whose
``result`` is the list of messages itself is read too.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from consumers.workflows.client import api_client
from consumers.workflows.ratelimit import seconds_from_retry_after
from statemachine.errors import WorkflowsApiError
from statemachine.longlived import LongLived

__all__ = [
    "SEND_BATCH",
    "Acked",
    "Pulled",
    "QueueClient",
    "QueueFailure",
    "QueueMessage",
    "message_text",
]

_MAX_DETAIL = 300
SEND_BATCH = 100  # messages Cloudflare takes in one batch


@dataclass(frozen=True, slots=True)
class QueueMessage:
    id: str
    body: str
    attempts: int
    lease_id: str
    timestamp_ms: float
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Pulled:
    messages: list[QueueMessage]
    backlog: int | None  # messages in the queue, as the answer's metrics count them
    oldest_ms: float | None  # when the oldest of them was sent (ms since the epoch)


@dataclass(frozen=True, slots=True)
class Acked:
    acked: int
    retried: int
    warnings: list[str]
    refused: frozenset[str] = frozenset()  # leases the queue did not take (expired, unknown)


@dataclass(frozen=True, slots=True)
class QueueFailure:
    """Why a call gave no usable answer: ``rate_limited``, ``server_error``, ``timeout``,
    ``network``, ``unauthorized``, ``not_found`` or ``invalid_response``."""

    reason: str
    http_status: int | None
    detail: str
    retry_after: float | None = None


def message_text(message: QueueMessage) -> str:
    """The message's body as text. A ``bytes`` message (``CF-Content-Type``) is base64; so
    is a ``json`` one by Cloudflare's pull-consumer page, while clients report them as plain
    JSON: a ``json`` body that is not JSON text already is read as base64."""
    kind = str(message.metadata.get("CF-Content-Type", "json"))
    body = message.body
    if kind == "bytes" or (kind == "json" and body.lstrip()[:1] not in ("{", "[", '"', "")):
        try:
            return base64.b64decode(body, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            if kind == "bytes":
                raise
    return body


class QueueClient(LongLived):
    """One queue of one account, read by its HTTP pull consumer. Start it (or ``async with``)."""

    def __init__(
        self,
        *,
        api_url: str,
        account_id: str,
        queue_id: str,
        api_token: str | None,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.queue_id = queue_id
        self._queue = (
            f"{api_url.rstrip('/')}/accounts/{quote(account_id, safe='')}"
            f"/queues/{quote(queue_id, safe='')}"
        )
        self._token = api_token or None
        self._timeout = timeout
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    def __repr__(self) -> str:  # no token here
        return f"QueueClient({self._queue!r})"

    async def start(self) -> None:
        if self._client is not None:
            return
        self._client = api_client(self._token, self._timeout, self._transport)

    async def stop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def pull(self, batch_size: int, visibility_timeout_ms: int) -> Pulled | QueueFailure:
        """Up to ``batch_size`` messages, each leased for ``visibility_timeout_ms``; the
        answer comes at once, empty or not."""
        body = {"batch_size": batch_size, "visibility_timeout_ms": visibility_timeout_ms}
        answer = await self._call("POST", "/messages/pull", body)
        if isinstance(answer, QueueFailure):
            return answer
        try:
            return _pulled(answer)
        except (KeyError, TypeError, ValueError) as exc:
            return self._failure("invalid_response", 200, f"unusable pull answer: {exc!r}")

    async def ack(
        self, leases: Sequence[str], retries: Sequence[tuple[str, float]] = ()
    ) -> Acked | QueueFailure:
        """Acknowledge the messages of ``leases``; make those of ``retries`` visible again after
        their delay (seconds). An expired lease is not acknowledged (its message comes back)."""
        body = {
            "acks": [{"lease_id": lease} for lease in leases],
            "retries": [{"lease_id": lease, "delay_seconds": round(d)} for lease, d in retries],
        }
        answer = await self._call("POST", "/messages/ack", body)
        if isinstance(answer, QueueFailure):
            return answer
        if not isinstance(answer, dict):
            return self._failure("invalid_response", 200, "ack answer is not an object")
        warnings = answer.get("warnings") or {}
        refused: frozenset[str] = frozenset()
        if isinstance(warnings, dict):  # {lease id: why it was not acknowledged}
            said = [f"{lease}: {why}" for lease, why in warnings.items()]
            refused = frozenset(str(lease) for lease in warnings)
        elif isinstance(warnings, list):
            said = [str(w) for w in warnings]
        else:
            said = [str(warnings)]
        acked, retried = int(answer.get("ackCount") or 0), int(answer.get("retryCount") or 0)
        return Acked(acked, retried, said, refused)

    async def send(self, bodies: Sequence[Any]) -> int | QueueFailure:
        """Send ``bodies`` (JSON values, at most 100) as one batch, in order, all or none: the
        producer API a product's Worker consumes. The number sent, or why none was."""
        if not 1 <= len(bodies) <= SEND_BATCH:
            raise ValueError(f"a batch holds 1 to {SEND_BATCH} messages, not {len(bodies)}")
        messages = [{"body": body, "content_type": "json"} for body in bodies]
        answer = await self._call("POST", "/messages/batch", {"messages": messages})
        if isinstance(answer, QueueFailure):
            return answer
        return len(bodies)

    async def describe(self) -> dict[str, Any] | QueueFailure:
        """The queue's metadata (its name, consumers), read without pulling anything: a pull
        would lease real messages and move them toward the queue's dead-letter queue."""
        answer = await self._call("GET", "", None)
        if isinstance(answer, (QueueFailure, dict)):
            return answer
        return self._failure("invalid_response", 200, "queue answer is not an object")

    async def _call(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        if self._client is None:
            raise WorkflowsApiError("the Queues client is not started")
        try:
            response = await self._client.request(method, self._queue + path, json=body)
        except httpx.TimeoutException as exc:
            return self._failure("timeout", None, f"no answer within {self._timeout:g}s ({exc!r})")
        except httpx.HTTPError as exc:
            return self._failure("network", None, f"{type(exc).__name__}: {exc}")
        status = response.status_code
        retry_after = seconds_from_retry_after(response.headers.get("retry-after"))
        try:
            doc = response.json()
        except ValueError:
            doc = None
        errors = doc.get("errors") if isinstance(doc, dict) else None
        said = "; ".join(
            f"{e.get('code')}: {e.get('message')}" for e in errors or () if isinstance(e, dict)
        )
        detail = f"HTTP {status}" + (f" ({said})" if said else "")
        if status == 429:
            return self._failure("rate_limited", status, detail, retry_after)
        if status in (401, 403):
            return self._failure("unauthorized", status, detail)
        if status == 404:
            return self._failure("not_found", status, detail)
        if status >= 500 or status == 408:
            return self._failure("server_error", status, detail, retry_after)
        if not isinstance(doc, dict) or status >= 300 or doc.get("success") is False:
            return self._failure("invalid_response", status, detail)
        return doc.get("result")

    def _failure(
        self, reason: str, status: int | None, detail: str, retry_after: float | None = None
    ) -> QueueFailure:
        if self._token:
            detail = detail.replace(self._token, "[redacted]")
        return QueueFailure(reason, status, detail[:_MAX_DETAIL], retry_after)


def _pulled(result: Any) -> Pulled:
    if isinstance(result, list):  # the older answer: the messages themselves
        return Pulled([_message(m) for m in result], None, None)
    if not isinstance(result, dict):
        raise TypeError(f"result is {type(result).__name__}")
    metrics = (result.get("metadata") or {}).get("metrics") or {}
    backlog = metrics.get("backlog_count", result.get("message_backlog_count"))
    oldest = metrics.get("oldest_message_timestamp_ms")
    return Pulled(
        [_message(m) for m in result.get("messages") or []],
        None if backlog is None else int(backlog),
        None if not oldest else float(oldest),
    )


def _message(raw: Any) -> QueueMessage:
    if not isinstance(raw, dict):
        raise TypeError("a message is not an object")
    body = raw.get("body")
    if not isinstance(body, str):  # a JSON body some shapes give decoded
        body = json.dumps(body)
    metadata = raw.get("metadata")
    return QueueMessage(
        id=str(raw["id"]),
        body=body,
        attempts=int(raw.get("attempts") or 1),
        lease_id=str(raw["lease_id"]),
        timestamp_ms=float(raw.get("timestamp_ms") or 0.0),
        metadata=metadata if isinstance(metadata, dict) else {},
    )
